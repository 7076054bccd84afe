"""Title normalisation, catalog lookup and parsing of model completions into items.

Resolution order for one mention: exact lookup of its normalised key (main title, then
alternate titles in parentheses), then a fuzzy fallback (RapidFuzz ratio over the catalog
keys, ``fuzzy_cutoff`` out of 100). The year only disambiguates: among catalog items that
share a key the closest year wins, and a title that is unique in the catalog resolves
whatever year the model wrote.

Normalisation repairs UTF-8 read as Latin-1 (mojibake), folds accents and case, moves
trailing articles to the front and then drops them (``Usual Suspects, The`` and
``The Usual Suspects`` share the key ``usual suspects``), spells ``&`` as ``and`` and
removes punctuation.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz import fuzz, process

from rectune.data.completions import DEFAULT_LIMITS, CompletionLimits, answer_text
from rectune.data.mentions import parse_mentions

ARTICLES = ("the", "a", "an", "les", "la", "le", "l'", "il", "das", "der", "die", "el", "los", "las", "un", "une")
_TRAILING_ARTICLE = re.compile(r"^(.*?),\s*(" + "|".join(re.escape(a) for a in ARTICLES) + r")$", re.IGNORECASE)
_LEADING_ARTICLE = re.compile(
    r"^(?:" + "|".join(re.escape(a) for a in ARTICLES if a != "l'") + r")\s+|^l'", re.IGNORECASE
)
_YEAR = re.compile(r"\s*\(\s*(\d{4})\s*\)\s*$")
_TRAILING_PAREN = re.compile(r"\s*\(([^()]*)\)\s*$")
_NON_WORD = re.compile(r"[^\w\s]+")
_MOJIBAKE_MARKS = ("Ã", "Â", "â€", "Ã©")
_MISSING = object()


def fix_mojibake(text: str) -> str:
    """Undo UTF-8 bytes that were decoded as Latin-1/cp1252 (``CitÃ©`` -> ``Cité``)."""
    if not any(mark in text for mark in _MOJIBAKE_MARKS):
        return text
    for codec in ("cp1252", "latin-1"):
        try:
            return text.encode(codec).decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            continue
    return text


# ASCII: every byte that is neither a letter, a digit nor whitespace (and "_") as a space, what
# _NON_WORD and the "_" replacement do, by one bytes.translate
_ASCII_WORDS = bytes(c if chr(c).isalnum() or chr(c).isspace() else 32 for c in range(128)) + bytes(range(128, 256))


def normalised_key(title: str) -> str:
    """Normalised lookup key of a title without its year or parenthesised alternates."""
    if title.isascii():  # most titles: nothing to repair or strip of accents (the slow part)
        text = _without_article(title.casefold().strip())
        return " ".join(text.encode().translate(_ASCII_WORDS).decode().split())
    text = unicodedata.normalize("NFKD", fix_mojibake(title))
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).casefold().strip()
    text = _without_article(text.replace("’", "'").replace("‘", "'"))
    return " ".join(_NON_WORD.sub(" ", text).replace("_", " ").split())


# catalog titles, KG values and conditions repeat: their keys are kept (a mention is keyed once, uncached)
title_key = functools.lru_cache(maxsize=1 << 20)(normalised_key)


def _without_article(text: str) -> str:
    """``usual suspects, the`` and ``the usual suspects`` -> ``usual suspects``; ``&`` spelled ``and``."""
    moved = _TRAILING_ARTICLE.match(text) if "," in text else None
    if moved:
        text = f"{moved.group(2)} {moved.group(1)}"
    leading = _LEADING_ARTICLE.match(text)
    if leading:
        text = text[leading.end() :]
    return text.replace("&", " and ")


def split_title(title: str) -> tuple[str, list[str], int | None]:
    """Split ``Boat, The (Das Boot) (1981)`` into ``("Boat, The", ["Das Boot"], 1981)``."""
    main, alternates, year = _split_title(title)
    return main, list(alternates), year


def _split_title(title: str) -> tuple[str, tuple[str, ...], int | None]:
    if "(" not in title:  # most mentions: no year, no alternates
        return title.strip(), (), None
    return _split_parenthesised(title)


@functools.lru_cache(maxsize=1 << 20)
def _split_parenthesised(title: str) -> tuple[str, tuple[str, ...], int | None]:
    text = title.strip()
    year = None
    match = _YEAR.search(text)
    if match and match.start() > 0:
        year = int(match.group(1))
        text = text[: match.start()]
    alternates = []
    while True:
        match = _TRAILING_PAREN.search(text)
        if not match or match.start() == 0:
            break
        alt = re.sub(r"^(?:a\.k\.a\.|aka)\s*", "", match.group(1).strip(), flags=re.IGNORECASE)
        if alt:
            alternates.append(alt)
        text = text[: match.start()]
    return text.strip(), tuple(alternates[::-1]), year


@dataclass
class CatalogItem:
    """An item: id, title (the source's spelling, matched against) and attributes (KG relations such as
    ``{"Director": [...]}``, MovieLens ``genres``, ``name`` and ``merged_ids``, Amazon ``categories`` and
    ``description``)."""

    id: str
    title: str
    attributes: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The title as prompts show it: MovieLens ``The English Patient (1996)``, else the title itself."""
        return self.attributes.get("name", self.title)

    @property
    def categories(self) -> list[str]:
        return self.attributes.get("categories", [])

    @property
    def description(self) -> str:
        return self.attributes.get("description", "")


@dataclass
class Extraction:
    """What a completion recommends: resolved catalog ids and unresolved mention keys, deduplicated;
    ``ranked`` holds both in the order the completion named them (for NDCG)."""

    item_ids: list[str]
    unresolved: list[str]
    ranked: list[str] = field(default_factory=list)
    named: int = 0  # titles named, repeats included: above ``count`` when the answer repeats itself
    sequence: list[str] = field(default_factory=list)  # every title named, in order, repeats included

    @property
    def count(self) -> int:
        return len(self.item_ids) + len(self.unresolved)


class TitleMatcher:
    """Resolves free-text titles to catalog ids and parses completions into items."""

    def __init__(
        self, items: Iterable[CatalogItem], fuzzy_cutoff: float = 90.0, limits: CompletionLimits = DEFAULT_LIMITS
    ):
        self.items = {item.id: item for item in items}
        self.fuzzy_cutoff = fuzzy_cutoff
        self.limits = limits
        self.capped = 0  # completions whose mentions were cut to limits.max_mentions
        self._by_key: dict[str, list[tuple[str, int | None]]] = {}
        for item in self.items.values():
            main, alternates, year = split_title(item.title)
            for name in [main, *alternates]:
                key = title_key(name)
                if key:
                    candidates = self._by_key.setdefault(key, [])
                    if all(existing != item.id for existing, _ in candidates):
                        candidates.append((item.id, year))
        self._sorted_keys = sorted(self._by_key, key=len)
        self._key_lengths = [len(key) for key in self._sorted_keys]
        self._cache: dict[str, str | None] = {}  # mention -> id, fuzzy allowed
        self._exact_cache: dict[str, str | None] = {}  # mention -> id, exact lookup only
        self._lookup_keys: dict[str, tuple[str, int | None]] = {}  # exact misses: (first key, year)
        self._unresolved_keys: dict[str, str] = {}  # exact misses: the key an unresolved mention is counted by

    def resolve(self, mention: str, *, fuzzy: bool = True) -> str | None:
        """Catalog id for ``mention``, or None when it names nothing in the catalog."""
        cached = (self._cache if fuzzy else self._exact_cache).get(mention, _MISSING)
        if cached is not _MISSING:
            return cached
        if not fuzzy:  # the parser asks this for every candidate split: skip the batch machinery
            return self._exact(mention)
        return self.resolve_many([mention])[0]

    def _exact(self, mention: str) -> str | None:
        """Exact lookup, cached; a miss keeps its first key and year for the fuzzy pass."""
        if "(" not in mention:  # most mentions: no year, no alternates, one key
            key = normalised_key(mention)
            candidates = self._by_key.get(key) if key else None
            found = self._exact_cache[mention] = candidates[0][0] if candidates else None
            if found is not None:
                self._cache[mention] = found
            else:
                self._lookup_keys[mention] = (key, None)
                self._unresolved_keys[mention] = key
            return found
        main, alternates, year = _split_title(mention)
        first = ""
        for name in (main, *alternates, mention):
            key = title_key(name)
            first = first or key
            candidates = self._by_key.get(key) if key else None
            if candidates:
                exact = self._closest_year(candidates, year)
                self._exact_cache[mention] = self._cache[mention] = exact
                return exact
        self._exact_cache[mention] = None
        self._lookup_keys[mention] = (first, year)
        self._unresolved_keys[mention] = title_key(main) or title_key(mention)
        return None

    def resolve_many(self, mentions: list[str], *, fuzzy: bool = True) -> list[str | None]:
        """Resolve many mentions at once: exact lookups, then one batched fuzzy pass over the misses."""
        misses: dict[str, tuple[str, int | None]] = {}
        for mention in dict.fromkeys(mentions):  # answers repeat titles: each distinct one once
            if mention in self._cache:
                continue
            if mention not in self._exact_cache:
                self._exact(mention)
            if fuzzy and self._exact_cache[mention] is None:
                misses[mention] = self._lookup_keys[mention]
        if misses:
            found = self._fuzzy_lookup(sorted({key for key, _ in misses.values() if len(key) >= 4}))
            for mention, (key, year) in misses.items():
                self._cache[mention] = self._closest_year(self._by_key[found[key]], year) if key in found else None
        cache = self._cache if fuzzy else self._exact_cache
        return [cache[mention] for mention in mentions]

    def _fuzzy_lookup(self, queries: list[str]) -> dict[str, str]:
        """Best catalog key with ratio >= cutoff for each query key, compared in length windows.

        ratio = 100 * (1 - indel / (len_a + len_b)) and indel >= |len_a - len_b|, so a key can only
        reach the cutoff when its length is within the window; nothing outside it is compared.
        """
        cut = 1 - self.fuzzy_cutoff / 100
        by_length: dict[int, list[str]] = {}
        for query in queries:
            by_length.setdefault(len(query), []).append(query)
        found = {}
        for length, group in by_length.items():
            low = bisect.bisect_left(self._key_lengths, length * (1 - cut) / (1 + cut))
            high = bisect.bisect_right(self._key_lengths, length * (1 + cut) / (1 - cut))
            window = self._sorted_keys[low:high]
            if not window:
                continue
            for chunk in range(0, len(group), 2048):
                queries_chunk = group[chunk : chunk + 2048]
                scores = process.cdist(
                    queries_chunk,
                    window,
                    scorer=fuzz.ratio,
                    score_cutoff=self.fuzzy_cutoff,
                    workers=-1,
                    dtype=np.float32,
                )
                best = scores.argmax(axis=1)
                for row, query in enumerate(queries_chunk):
                    if scores[row, best[row]] >= self.fuzzy_cutoff:
                        found[query] = window[best[row]]
        return found

    @staticmethod
    def _closest_year(candidates: list[tuple[str, int | None]], year: int | None) -> str:
        if year is None or len(candidates) == 1:
            return candidates[0][0]
        return min(candidates, key=lambda c: abs((c[1] or 0) - year))[0]

    def extract(self, completion: object) -> Extraction:
        """Parse any completion text into deduplicated items; never raises."""
        return self.extract_many([completion])[0]

    def extract_many(self, completions: list[object]) -> list[Extraction]:
        """:meth:`extract` for many completions, with one batched resolution pass.

        Each completion is read through :func:`~rectune.data.completions.answer_text` (reasoning removed,
        capped); at most ``limits.max_mentions`` mentions count, and :attr:`capped` counts the cuts.
        """
        parsed = []
        for completion in completions:
            mentions = parse_mentions(answer_text(completion, self.limits).text, self)
            if len(mentions) > self.limits.max_mentions:
                self.capped += 1
                mentions = mentions[: self.limits.max_mentions]
            parsed.append(mentions)
        self.resolve_many([m for mentions in parsed for m in mentions])
        extractions = []
        for mentions in parsed:
            item_ids: list[str] = []
            unresolved: list[str] = []
            ranked: list[str] = []
            sequence: list[str] = []
            for mention in mentions:
                item_id = self._cache[mention]
                if item_id is not None:
                    sequence.append(item_id)
                    if item_id not in item_ids:
                        item_ids.append(item_id)
                        ranked.append(item_id)
                else:
                    key = self._unresolved_keys[mention]
                    if key:
                        sequence.append(key)
                    if key and key not in unresolved:
                        unresolved.append(key)
                        ranked.append(key)
            extractions.append(Extraction(item_ids, unresolved, ranked, len(sequence), sequence))
        return extractions


def display_title(title: str) -> str:
    """Natural spelling for training targets: ``Usual Suspects, The (1995)`` -> ``The Usual Suspects (1995)``."""
    main, _, year = split_title(fix_mojibake(title))
    moved = _TRAILING_ARTICLE.match(main)
    if moved:
        article = moved.group(2)
        main = f"{article}{'' if article.endswith(chr(39)) else ' '}{moved.group(1)}"
    return f"{main} ({year})" if year else main
