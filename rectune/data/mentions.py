"""Parsing model completions into title mentions.

The paper's answer form comes first: titles separated by ``[SEP]`` (``Heat [SEP] Ronin``, with or
without spaces, a trailing separator, years or quotes). Any other text is read line by line:
numbered and bulleted lists (nested ones by the level that names titles), comma or semicolon lists
(:mod:`rectune.data.title_lists`), markdown emphasis and tables, quoted titles inside sentences and
``Title (Year) - description`` lines. Prose (intros, refusals) yields no mention.
Resolving mentions to catalog items is :class:`~rectune.data.titles.TitleMatcher`'s job; a matcher passed
here only keeps commas and colons that belong to catalog titles.
"""

from __future__ import annotations

import re
import weakref

from rectune.data.title_lists import MAX_TITLE_CHARS, TitleMatcher, clean_segment, split_commas

SEP = "[SEP]"
SEPARATOR = re.compile(r"\s*\[\s*SEP\s*\]\s*", re.IGNORECASE)
_LIST_MARKER = re.compile(r"^\s*(?:#+\s*)?(?:[-*•+·]|\d{1,3}\s*[.):]|[(\[]\d{1,3}[)\]]|[a-z][.)](?=\s))\s*")
_MARKDOWN = re.compile(r"\*\*|__|`|~~")
_INTRO = re.compile(r"^(.{3,80}?):\s+(\S.*)$")
_QUOTED = re.compile(r"[\"“”«»]([^\"“”«»]{2,120})[\"“”«»]|\*([^*]{2,120})\*")
_TITLE_WITH_YEAR = re.compile(r"^(.+?\(\s*\d{4}\s*\))")
_YEAR_FIRST = re.compile(r"^((?:18|19|20)\d\d)\s*[:–—-]\s+(\S.*)$")  # "1985: The Shining"
_DESCRIPTION_CUTS = (" - ", " – ", " — ", ": ", " | ", " by ", " directed by ", " starring ")
_PROSE_STARTS = re.compile(
    r"^(?:here|sure|certainly|of course|i\b|i'm|i'd|sorry|unfortunately|based on|these|this|note|as an|"
    r"there (?:are|is)|you (?:might|may|could)|if you|enjoy|hope)",
    re.IGNORECASE,
)


def _is_prose(text: str) -> bool:
    """A sentence rather than a title: intros, refusals, explanations."""
    words = text.split()
    if not words or len(text) > MAX_TITLE_CHARS:
        return True
    if text.endswith(":") or len(words) > 12:
        return True
    if text[-1] in ".?" and len(words) > 4:
        return True
    return bool(_PROSE_STARTS.match(text)) and len(words) > 3


def _cut_description(segment: str, matcher: TitleMatcher | None) -> str:
    """``Heat (1995) - a heist thriller`` -> ``Heat (1995)``; keeps colons that belong to titles, and a
    whole catalog title such as ``Boat, The (Das Boot) (1981)``; ``1985: The Shining`` -> ``The Shining (1985)``
    unless the whole names a catalog title (``2001: A Space Odyssey``)."""
    years = []  # leading years, peeled in a loop: an answer may repeat "1985: " thousands of times
    while matcher is None or matcher.resolve(segment, fuzzy=False) is None:
        year_first = _YEAR_FIRST.match(segment) if segment[:1].isdigit() else None
        if not year_first:
            segment = _cut_after_title(segment, matcher)
            break
        years.append(year_first.group(1))
        segment = year_first.group(2)
    for year in reversed(years):  # the innermost year the title lacks is the one it takes
        title = clean_segment(segment)
        segment = title if _TITLE_WITH_YEAR.match(title) else f"{title} ({year})"
    return segment


def _cut_after_title(segment: str, matcher: TitleMatcher | None) -> str:
    """A segment without a leading year, cut after its title's year or before its description."""
    with_year = _TITLE_WITH_YEAR.match(segment) if "(" in segment else None
    if with_year:
        return with_year.group(1)
    cuts = [cut for cut in map(segment.find, _DESCRIPTION_CUTS) if cut > 0]
    if len(cuts) > 1:
        cuts = sorted(set(cuts), reverse=True)
    if matcher is not None:
        for end in cuts:  # the whole segment was looked up above
            if matcher.resolve(segment[:end], fuzzy=False) is not None:
                return segment[:end]
    return segment[: cuts[-1]] if cuts else segment


def parse_mentions(text: str, matcher: TitleMatcher | None = None) -> list[str]:
    """Split a completion into title mentions.

    An answer holding ``[SEP]`` is split on it, every non-empty piece one title whatever words it starts
    with: the first piece keeps only what follows its intro (its last line, or the text after an intro
    sentence's colon), the last piece only its first line (a closing sentence after it is prose). An
    answer holding a numbered or bulleted list, or one title a line, is read from the list's items
    only: titles quoted in the sentences around it were mentioned, not recommended. Any other answer is
    read line by line as described above. ``text`` is an answer: reasoning blocks are removed before
    (:func:`~rectune.data.completions.answer_text`).
    """
    if "[" in text and SEPARATOR.search(text):
        return [m for m in (_piece_title(p, matcher) for p in _sep_pieces(text)) if m]
    mentions, memo = [], _line_memo(matcher)
    for _, item, line in _chosen_lines(text, matcher):
        mentions.extend(_memoised_line_mentions(line, item, matcher, memo))
    return [m for m in mentions if m]


def line_mentions(text: str, matcher: TitleMatcher | None = None) -> list[tuple[int, int, list[str]]]:
    """``(start, end, mentions)`` of each line an answer without ``[SEP]`` is read from (:func:`parse_mentions`),
    the offsets in ``text``: which characters wrote which titles."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    lengths, memo = [len(line) for line in text.splitlines()], _line_memo(matcher)
    read = []
    for index, item, line in _chosen_lines(text, matcher):
        mentions = [m for m in _memoised_line_mentions(line, item, matcher, memo) if m]
        read.append((starts[index], starts[index] + lengths[index], mentions))
    return read


def _chosen_lines(text: str, matcher: TitleMatcher | None) -> list[tuple[int, bool, str]]:
    """``(index in text.splitlines(), is a list item, the line without its marker)`` of the lines read: a list's
    items (of its outline's level), else the lines of one title each, else every line."""
    lines = []  # (index, is a list item, the line without its marker)
    listed_at = []  # (indent, the list item) of each list item that holds text
    split = text.splitlines()
    for index, line in _without_table_headings(split) if "|" in text else enumerate(split):
        marker = _LIST_MARKER.match(line)
        if not marker:
            lines.append((index, False, line))
            continue
        lines.append((index, True, line[marker.end() :]))
        if lines[-1][2].strip():
            indented = line.expandtabs(4) if "\t" in line else line
            listed_at.append((len(indented) - len(indented.lstrip()), lines[-1]))
    if len(listed_at) >= 2:
        return _outline_level(listed_at, matcher)
    listed = _title_lines(lines, matcher)
    return listed if len(listed) >= 2 else lines


def _memoised_line_mentions(line: str, item: bool, matcher: TitleMatcher | None, memo: dict | None) -> tuple[str, ...]:
    """:func:`_line_mentions`, kept in ``memo`` (:func:`_line_memo`, fetched once an answer)."""
    found = memo.get((line, item)) if memo is not None else None
    if found is None:
        found = tuple(_line_mentions(line, item, matcher))
        if memo is not None and len(memo) < _MEMO_LINES:
            memo[(line, item)] = found
    return found


# A line's mentions depend only on the line and the matcher's exact lookups; answers repeat the same
# titles a lot (300k lines of a 30k-answer file hold ~140k distinct ones), so each matcher keeps them.
_MEMO_LINES = 1 << 20
_LINE_MEMOS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _line_memo(matcher: TitleMatcher | None) -> dict | None:
    if matcher is None:
        return None
    try:
        return _LINE_MEMOS.setdefault(matcher, {})
    except TypeError:  # a matcher that takes no weak reference is not memoised
        return None


def _sep_pieces(text: str) -> list[str]:
    """The ``[SEP]`` pieces less the intro before the first title and the prose after the last."""
    pieces = [piece.strip() for piece in SEPARATOR.split(text)]
    while pieces and not pieces[-1]:
        pieces.pop()  # a trailing separator
    if len(pieces) > 1 or (pieces and "\n" in pieces[0]):
        lines = [line for line in pieces[0].splitlines() if line.strip()]
        pieces[0] = lines[-1] if lines else ""  # the lines before the first title are its intro
    if len(pieces) > 1:
        pieces[-1] = _before_outro(pieces[-1])
    return [_after_intro(piece) for piece in pieces if piece.strip()]


_SENTENCE_END = re.compile(r"[.!?]\s")
_ADDRESSING = re.compile(r"\b(?:you|your|some|these|here|recommend\w*|suggest\w*|try|enjoy\w*)\b", re.IGNORECASE)


def _after_intro(piece: str) -> str:
    """A piece less an intro sentence before a colon (``here are some books: *Anne of Green Gables*``); a
    title's own colon stays (``The Lord of the Rings: The Two Towers``)."""
    for match in reversed(list(re.finditer(r":\s", piece))):
        before = piece[: match.start()].strip()
        if _PROSE_STARTS.match(before) or _SENTENCE_END.search(before) or _ADDRESSING.search(before):
            return piece[match.end() :]
        if len(before.split()) > 8:
            return piece[match.end() :]
    return piece


def _before_outro(piece: str) -> str:
    """The last title without what follows it: the lines after it, or a closing sentence on its line."""
    first = piece.splitlines()[0]
    for match in _SENTENCE_END.finditer(first):
        rest = first[match.end() :].strip()
        if _PROSE_STARTS.match(rest) and len(rest.split()) > 2 or _is_prose(rest):
            return first[: match.start() + 1]
    return first


_EMPHASIS = re.compile(r"(?<!\w)[*_]+|[*_]+(?!\w)")  # around words, not inside them (M*A*S*H)


_AUTHOR = re.compile(r"\s+by\s+(?:[A-Z][\w.'-]*\.?\s*){2,4}$")  # " by Maya Angelou", " by L.M. Montgomery"


def _piece_title(piece: str, matcher: TitleMatcher | None) -> str:
    """One ``[SEP]`` piece as one title: list marker, emphasis and quotes removed, then what follows a
    year or a trailing `` by Author`` trimmed; colons and dashes stay (``Mad Max: Fury Road``)."""
    line = _LIST_MARKER.sub("", piece.strip(), count=1)
    line = clean_segment(" ".join(_EMPHASIS.sub("", _MARKDOWN.sub("", line)).split()))
    if matcher is not None and matcher.resolve(line, fuzzy=False) is not None:
        return line
    with_year = _TITLE_WITH_YEAR.match(line)
    return clean_segment(with_year.group(1) if with_year else _AUTHOR.sub("", line))


def _outline_level(
    listed_at: list[tuple[int, tuple[int, bool, str]]], matcher: TitleMatcher | None
) -> list[tuple[int, bool, str]]:
    """The items of a nested list that name what it recommends: of its levels (indents two spaces apart) that
    are not all headings ("Thrillers:"), the one with the most items naming a catalog title, the shallowest of
    those tied. ``1. **Heat**`` over ``   - Director: Michael Mann`` keeps Heat, whose details would otherwise
    count as titles recommended; ``- **Thrillers**`` over ``  - Heat`` keeps Heat."""
    levels = {}
    for indent, item in listed_at:
        levels.setdefault(indent // 2, []).append(item)
    if len(levels) == 1:
        return [item for _, item in listed_at]
    kept = [items for _, items in sorted(levels.items()) if not all(_heading(line) for _, _, line in items)]
    if not kept:
        return [item for _, item in listed_at]
    return max(kept, key=lambda items: _titled(items, matcher)) if matcher is not None else kept[0]


def _heading(line: str) -> bool:
    return _MARKDOWN.sub("", line).strip().endswith(":")


def _titled(items: list[tuple[int, bool, str]], matcher: TitleMatcher) -> int:
    """How many of ``items`` name a catalog title (``max`` keeps the first of levels tied)."""
    memo = _line_memo(matcher)
    return sum(any(map(matcher.resolve, _memoised_line_mentions(line, item, matcher, memo))) for _, item, line in items)


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")  # a markdown table's |---|---|


def _without_table_headings(lines: list[str]) -> list[tuple[int, str]]:
    """``(index, line)`` of the lines less each markdown table's heading row (``| Title | Year |``) and rule: the
    heading names no title recommended."""
    headings = {i - 1 for i, line in enumerate(lines) if i and "|" in line and _TABLE_RULE.match(line)}
    return [(i, line) for i, line in enumerate(lines) if i not in headings and i - 1 not in headings]


def _title_lines(lines: list[tuple[int, bool, str]], matcher: TitleMatcher | None) -> list[tuple[int, bool, str]]:
    """Lines that hold one title each (short, not a sentence, or a catalog title however long), when the answer
    is such a list."""
    return [
        (index, item, line)
        for index, item, line in lines
        if line.strip()
        and (
            (not _is_prose(line.strip()) and not _QUOTED.search(line))
            or (matcher is not None and matcher.resolve(clean_segment(line), fuzzy=False) is not None)
        )
    ]


_QUOTE_CHAR = re.compile('["“”«»*]')


# What makes a list item more than its title: markdown, an intro or a year before a colon, quotes, a year in
# parentheses, a description after a dash, bar, "by" or "starring". An item with none of them is its title.
_NOT_PLAIN = re.compile(r'[*_`~:"“”«»(]| [-–—|] | by | starring ')


def _line_mentions(line: str, is_list_item: bool, matcher: TitleMatcher | None) -> list[str]:
    """The mentions of one line (without its list marker)."""
    if is_list_item and not _NOT_PLAIN.search(line):
        segment = clean_segment(line)
        if not segment[:1].isdigit():  # else perhaps a year first ("1985- The Shining")
            title = clean_segment(segment)
            accepted = title and ((matcher is not None and matcher.resolve(title, fuzzy=False)) or not _is_prose(title))
            return [title] if accepted else []
    return _any_line_mentions(line, is_list_item, matcher)


def _any_line_mentions(line: str, is_list_item: bool, matcher: TitleMatcher | None) -> list[str]:
    """:func:`_line_mentions` for any line."""
    if "*" in line or "_" in line or "`" in line or "~" in line:
        line = _MARKDOWN.sub("", line)
        if is_list_item:
            line = _EMPHASIS.sub("", line)  # *Title* as a list item is the title, emphasised
    line = line.strip()
    if not line:
        return []
    intro = _INTRO.match(line) if ":" in line else None
    if intro and _PROSE_STARTS.match(intro.group(1)):
        line = intro.group(2)
    quoted = [q or i for q, i in _QUOTED.findall(line)] if _QUOTE_CHAR.search(line) else []
    if quoted and _is_prose(_QUOTED.sub("X", line)):
        return [clean_segment(q) for q in quoted]
    # A prose line (intro, refusal, explanation) contributes only titles that resolve exactly.
    prose_line = not is_list_item and _is_prose(line)
    mentions = []
    for segment in [line] if is_list_item else split_commas(line, matcher):
        title = clean_segment(_cut_description(clean_segment(segment), matcher))
        if title and (
            (matcher is not None and matcher.resolve(title, fuzzy=False)) or not (prose_line or _is_prose(title))
        ):
            mentions.append(title)
    return mentions
