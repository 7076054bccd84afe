"""Keeping credentials out of what RecTune prints and writes: URLs and the command line W&B records.

A server's URL may carry a key in its user information (``http://user:KEY@host``, where a password
may itself hold ``@``) or in any query parameter (``?code=KEY``: servers name them as they like), so
every userinfo and every query value is hidden. W&B reads ``sys.argv`` when a run starts and keeps
it in the run file that ``wandb sync`` uploads; :func:`argv_redacted` hides the same things there.
"""

from __future__ import annotations

import base64
import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from urllib.parse import parse_qsl, unquote, urlsplit

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


_AUTHORIZATION = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: its userinfo (``user:password``), the password, every query value, and
    the Basic ``Authorization`` form of the userinfo (a server may echo any of them)."""
    parts = urlsplit(url)
    found = [value for _, value in parse_qsl(parts.query, keep_blank_values=False)]
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found += [userinfo, unquote(userinfo), base64.b64encode(unquote(userinfo).encode()).decode()]
        found += [unquote(parts.password)] if parts.password else []
    return [secret for secret in found if len(secret) >= 4]  # a 1-3 character value would hide ordinary text


def redact_secrets(text: str, secrets: Iterable[str]) -> str:
    """A server's text (an error message, a reason) as RecTune may print or store it: URLs redacted
    (:func:`redact_url`), every ``Bearer``/``Basic`` credential and each of ``secrets`` (the API key, the
    URL's credentials: :func:`url_secrets`) replaced by ``***``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):  # longest first: no half-hidden keys
        text = text.replace(secret, "***")
    return _AUTHORIZATION.sub(lambda match: f"{match.group(1)} ***", redact_url(text))


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
