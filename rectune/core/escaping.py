"""Escaping what RecTune writes for others to read: CSV cells, Markdown cells and lines, shell words.

Names in reports and cards come from strangers (folder names, recipe names): a CSV cell starting with
``= + - @`` (or a tab or carriage return) would run as a formula in a spreadsheet, a ``|`` would break
a Markdown table, raw HTML would render on the Hub, and a newline would start a heading or a code block.
"""

from __future__ import annotations

import html
import re
import shlex

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet shows as text (``'`` before a formula start); numbers unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def markdown_text(value: object) -> str:
    """One line of Markdown with no HTML, no code spans and no line breaks (control characters become spaces)."""
    return html.escape(_LINE_BREAKS.sub(" ", str(value)), quote=False).replace("`", "\\`")


def markdown_cell(value: object) -> str:
    """A Markdown table cell: :func:`markdown_text` with ``|`` escaped."""
    return markdown_text(value).replace("|", "\\|")


def shell_word(value: object) -> str:
    """``value`` quoted for a POSIX shell command line."""
    return shlex.quote(str(value))
