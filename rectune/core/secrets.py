"""Keeping credentials out of what RecTune prints and writes: URLs and the command line W&B records.

A server's URL may carry a key in its user information (``http://user:KEY@host``, where a password
may itself hold ``@``) or in any query parameter (``?code=KEY``: servers name them as they like), so
every userinfo and every query value is hidden. W&B reads ``sys.argv`` when a run starts and keeps
it in the run file that ``wandb sync`` uploads; :func:`argv_redacted` hides the same things there.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator

# scheme, then userinfo up to the last "@" before the host's end ("/", "?", "#"), the host and path, the query
_URL = re.compile(r"\b([a-zA-Z][\w+.-]*://)([^\s/?#]*@)?([^\s?#]*)(\?[^\s#]*)?")
_QUERY_VALUE = re.compile(r"([?&][^=&\s]*=)[^&\s]*")
_BARE_PARAMETER = re.compile(r"([?&])([^=&\s]+)(?=&|$)")
# flags whose next word (or ``=value``) is a credential, however the user spelled the dashes
SECRET_FLAGS = ("hub_token", "token", "api_key", "password")


def redact_url(text: str) -> str:
    """``text`` (a URL, or a message holding URLs) with every userinfo and every query value as ``***``."""

    def hide(match: re.Match) -> str:
        scheme, userinfo, rest, query = match.groups()
        if query:
            query = _BARE_PARAMETER.sub(r"\1***", _QUERY_VALUE.sub(r"\1***", query))
        return f"{scheme}{'***@' if userinfo else ''}{rest}{query or ''}"

    return _URL.sub(hide, text)


def redacted_args(args: list[str]) -> list[str]:
    """``args`` with URLs redacted and the value of every credential flag (``--hub-token X``, ``--api_key=X``)
    replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, equals, _ = arg.partition("=")
        if flag.startswith("-") and flag.lstrip("-").replace("-", "_").lower() in SECRET_FLAGS:
            out.append(f"{flag}=***" if equals else flag)
            hide_next = not equals
            continue
        out.append(redact_url(arg))
    return out


@contextlib.contextmanager
def argv_redacted() -> Iterator[None]:
    """``sys.argv`` redacted while the block runs (around ``wandb.init``, which records it), then restored."""
    original = sys.argv[:]
    sys.argv[:] = [original[0], *redacted_args(original[1:])] if original else original
    try:
        yield
    finally:
        sys.argv[:] = original
