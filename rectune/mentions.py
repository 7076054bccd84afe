"""Parsing model completions into title mentions.

The paper's answer form comes first: titles separated by ``[SEP]`` (``Heat [SEP] Ronin``, with or
without spaces, a trailing separator, years or quotes). Any other text is read line by line:
numbered and bulleted lists, comma or semicolon lists, markdown emphasis, quoted titles inside
sentences and ``Title (Year) - description`` lines. Prose (intros, refusals) yields no mention.
Resolving mentions to catalog items is :class:`~rectune.titles.TitleMatcher`'s job; a matcher passed
here only keeps commas and colons that belong to catalog titles.
"""

from __future__ import annotations

import re
from typing import Protocol


class TitleMatcher(Protocol):
    """What parsing asks of a :class:`rectune.titles.TitleMatcher`: an exact catalog lookup."""

    def resolve(self, mention: str, *, fuzzy: bool = True) -> str | None: ...


SEP = "[SEP]"
_SEPARATOR = re.compile(r"\s*\[\s*SEP\s*\]\s*", re.IGNORECASE)
_LIST_MARKER = re.compile(r"^\s*(?:#+\s*)?(?:[-*•+·]|\d{1,3}\s*[.):]|\(\d{1,3}\)|[a-z][.)](?=\s))\s*")
_MARKDOWN = re.compile(r"\*\*|__|`|~~")
_MARKDOWN_CHARS = frozenset("*_`~")
_INTRO = re.compile(r"^(.{3,80}?):\s+(\S.*)$")
_LIST_SEPARATORS = re.compile(r"[;,]")
_QUOTED = re.compile(r"[\"“”«»]([^\"“”«»]{2,120})[\"“”«»]|\*([^*]{2,120})\*")
_TITLE_WITH_YEAR = re.compile(r"^(.+?\(\s*\d{4}\s*\))")
_DESCRIPTION_CUTS = (" - ", " – ", " — ", ": ", " | ", " by ", " directed by ", " starring ")
_PROSE_STARTS = re.compile(
    r"^(?:here|sure|certainly|of course|i\b|i'm|i'd|sorry|unfortunately|based on|these|this|note|as an|"
    r"there (?:are|is)|you (?:might|may|could)|if you|enjoy|hope)",
    re.IGNORECASE,
)
_MAX_TITLE_CHARS = 150


def _is_prose(text: str) -> bool:
    """A sentence rather than a title: intros, refusals, explanations."""
    words = text.split()
    if not words or len(text) > _MAX_TITLE_CHARS:
        return True
    if text.endswith(":") or len(words) > 12:
        return True
    if text[-1] in ".?" and len(words) > 4:
        return True
    return bool(_PROSE_STARTS.match(text)) and len(words) > 3


def _clean(segment: str) -> str:
    segment = segment.strip().strip("\"'“”‘’«»").strip()
    return segment.rstrip(".,;").strip()


def _cut_description(segment: str, matcher: TitleMatcher | None) -> str:
    """``Heat (1995) - a heist thriller`` -> ``Heat (1995)``; keeps colons that belong to titles, and a
    whole catalog title such as ``Boat, The (Das Boot) (1981)``."""
    if matcher is not None and matcher.resolve(segment, fuzzy=False) is not None:
        return segment
    with_year = _TITLE_WITH_YEAR.match(segment)
    if with_year:
        return with_year.group(1)
    cuts = sorted({cut for cut in map(segment.find, _DESCRIPTION_CUTS) if cut > 0}, reverse=True)
    if matcher is not None:
        for end in [len(segment), *cuts]:
            if matcher.resolve(segment[:end], fuzzy=False) is not None:
                return segment[:end]
    return segment[: cuts[-1]] if cuts else segment


def _split_commas(line: str, matcher: TitleMatcher | None) -> list[str]:
    """Split a comma list, re-joining pieces that form one catalog title (``Usual Suspects, The``)."""
    if "," not in line and ";" not in line:
        return [line]
    pieces = _LIST_SEPARATORS.split(line)
    segments = []
    start = 0
    while start < len(pieces):
        end = start + 1
        if matcher is not None:
            for stop in range(min(len(pieces), start + 4), start + 1, -1):
                if matcher.resolve(",".join(pieces[start:stop]), fuzzy=False) is not None:
                    end = stop
                    break
        segments.append(",".join(pieces[start:end]))
        start = end
    return segments


def parse_mentions(text: str, matcher: TitleMatcher | None = None) -> list[str]:
    """Split a completion into title mentions.

    An answer holding ``[SEP]`` is split on it, each piece one title (commas inside a piece belong to
    the title); otherwise lines, lists and quoted titles are read as described above. ``text`` is an
    answer: reasoning blocks are removed before (:func:`~rectune.completions.answer_text`).
    """
    if "[" in text and _SEPARATOR.search(text):
        lines = [line for piece in _SEPARATOR.split(text) for line in piece.splitlines()]
        mentions = [m for line in lines for m in _line_mentions(line, matcher, separated=True)]
    else:
        mentions = [m for line in text.splitlines() for m in _line_mentions(line, matcher, separated=False)]
    return [m for m in mentions if m]


def _line_mentions(raw_line: str, matcher: TitleMatcher | None, separated: bool) -> list[str]:
    """The mentions of one line; ``separated``: the line is (part of) one ``[SEP]`` piece, so one title."""
    is_list_item = separated or bool(_LIST_MARKER.match(raw_line))
    line = _LIST_MARKER.sub("", raw_line, count=1)
    line = (_MARKDOWN.sub("", line) if _MARKDOWN_CHARS.intersection(line) else line).strip()
    if not line:
        return []
    intro = _INTRO.match(line) if ":" in line else None
    if intro and _PROSE_STARTS.match(intro.group(1)):
        line = intro.group(2)
    quoted = [q or i for q, i in _QUOTED.findall(line)]
    if quoted and _is_prose(_QUOTED.sub("X", line)):
        return [_clean(q) for q in quoted]
    # A prose line (intro, refusal, explanation) contributes only titles that resolve exactly.
    prose_line = not is_list_item and _is_prose(line)
    mentions = []
    for segment in [line] if is_list_item else _split_commas(line, matcher):
        title = _clean(_cut_description(_clean(segment), matcher))
        if not title:
            continue
        resolves = matcher is not None and matcher.resolve(title, fuzzy=False) is not None
        if resolves or not (prose_line or _is_prose(title)):
            mentions.append(title)
    return mentions
