"""Escaping what RecTune writes for others to read: CSV cells, Markdown cells and lines, shell words, and
the text it prints on a terminal.

Names in reports and cards come from strangers (folder names, recipe names): a CSV cell starting with
``= + - @`` (or a tab or carriage return) would run as a formula in a spreadsheet, a ``|`` would break
a Markdown table, raw HTML would render on the Hub, and a newline would start a heading or a code block.
Errors and warnings quote servers, model folders and data files: an escape sequence there would retitle
the terminal, clear it or write the user's clipboard (OSC 52), and a bidirectional override would show
the line in another order than it reads.
"""

from __future__ import annotations

import html
import re
import shlex

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")  # C0 and C1 controls, DEL, line breaks
# every C0 and C1 control but tab and newline, DEL, Unicode's line breaks, bidirectional controls, lone surrogates
_NOT_FOR_TERMINALS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet shows as text (``'`` before a formula start); numbers unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def markdown_text(value: object) -> str:
    """One line of Markdown with no HTML, no code spans and no line breaks (control characters, C1's too, such as
    the one-byte CSI ``\x9b``, become spaces)."""
    return html.escape(_LINE_BREAKS.sub(" ", str(value)), quote=False).replace("`", "\\`")


def markdown_cell(value: object) -> str:
    """A Markdown table cell: :func:`markdown_text` with ``|`` escaped."""
    return markdown_text(value).replace("|", "\\|")


def shell_word(value: object) -> str:
    """``value`` quoted for a POSIX shell command line."""
    return shlex.quote(str(value))


def terminal_control(text: str) -> str | None:
    """The first character of ``text`` a terminal would act on rather than show, or None."""
    found = _NOT_FOR_TERMINALS.search(text)
    return found.group() if found else None


def terminal_text(value: object) -> str:
    """``value`` as it may be printed on a terminal: the characters a terminal would act on rather than show
    are written as Python escapes (``\\x1b``, ``\\u202e``); tabs and newlines stay."""
    return _NOT_FOR_TERMINALS.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), str(value))
