"""One line's list of titles split into its titles: commas and semicolons, and the "and" or "or" before the last.

A comma may belong to a title (``Usual Suspects, The``; Amazon's product titles hold half a dozen), and so may an
"and" (``Pride and Prejudice``): with a matcher at hand, pieces that form one catalog title stay together.
"""

from __future__ import annotations

import re
from typing import Protocol


class TitleMatcher(Protocol):
    """What parsing asks of a :class:`rectune.data.titles.TitleMatcher`: an exact catalog lookup."""

    def resolve(self, mention: str, *, fuzzy: bool = True) -> str | None: ...


MAX_TITLE_CHARS = 150  # longer is a sentence, not a title
_LIST_SEPARATORS = re.compile(r"[;,]")


def clean_segment(segment: str) -> str:
    """``segment`` without the quotes around it and the punctuation after it."""
    segment = segment.strip().strip("\"'“”‘’«»").strip()
    return segment.rstrip(".,;").strip()


def split_commas(line: str, matcher: TitleMatcher | None) -> list[str]:
    """Split a comma list, re-joining pieces that form one catalog title (``Usual Suspects, The``; a whole line
    that is one, however many commas it holds), and its last items joined by "and" or "or"
    (:func:`split_conjunction`)."""
    if "," not in line and ";" not in line:
        return split_conjunction(line, matcher)
    if matcher is not None and matcher.resolve(clean_segment(line), fuzzy=False) is not None:
        return [line]  # one title with many commas: Amazon's, written one a line as LLMRec's prompts ask
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
        segment = ",".join(pieces[start:end])
        if start and matcher is not None and matcher.resolve(clean_segment(segment), fuzzy=False) is None:
            segment = _LEADING_CONJUNCTION.sub("", segment)  # "Heat, Ronin, and Fargo": an Oxford comma's "and"
        segments += split_conjunction(segment, matcher)
        start = end
    return segments


_LEADING_CONJUNCTION = re.compile(r"^\s*(?:and|or|&)\s+", re.IGNORECASE)
_CONJUNCTION = re.compile(r"\s+(?:and|or|&)\s+", re.IGNORECASE)


def split_conjunction(segment: str, matcher: TitleMatcher | None) -> list[str]:
    """``Ronin and Fargo`` -> ``Ronin``, ``Fargo`` where the whole names no catalog title and a side of an "and"
    (or "or", "&") does; ``Pride and Prejudice`` stays whole, as does any segment without a matcher to ask.
    Read left to right in one pass: an answer may chain thousands of "and"s."""
    if matcher is None or not _CONJUNCTION.search(segment) or matcher.resolve(clean_segment(segment), fuzzy=False):
        return [segment]

    def titled(text: str) -> bool:
        return len(text) <= MAX_TITLE_CHARS and matcher.resolve(clean_segment(text), fuzzy=False) is not None

    parts, start = [], 0
    for match in _CONJUNCTION.finditer(segment):
        if titled(segment[start : match.start()]) or titled(segment[match.end() :]):
            parts.append(segment[start : match.start()])
            start = match.end()
    return [*parts, segment[start:]]
