"""Ratings and reviews from public sources, read into one shape for PerRecBench and LLMRec.

Three source formats, recognised per file (``.gz`` files are read compressed):

* **Amazon reviews 2023** (JSONL): reviews ``{user_id, parent_asin|asin, rating, timestamp
  (ms), title, text}``; metadata ``{parent_asin, title, categories, description, ...}``.
* **Amazon reviews 2014/2018** (one JSON object per line; 2014 metadata lines are Python
  literals): reviews ``{reviewerID, asin, overall, unixReviewTime (s), summary, reviewText}``;
  metadata ``{asin, title, category|categories, description}``.
* **MovieLens**, every release as distributed (ml-100k, ML-1M/10M, ml-latest/20M/25M/32M; see
  :mod:`rectune.data.movielens`), a release folder or one of its files.

The format is recognised from the file's content, not its name. Every record is checked; a bad one
raises :class:`DataError` naming the file, line and key.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rectune.core.cli import add_output_arguments
from rectune.core.io import CONTROL, DataError, whole_characters
from rectune.data import movielens
from rectune.data.titles import CatalogItem


@dataclass(slots=True)  # millions of them at the releases' sizes: no per-object dict
class Review:
    user: str
    item: str
    rating: float
    timestamp: int  # seconds
    title: str = ""  # review title / summary
    text: str = ""


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """JSON objects, one per line; Python-literal lines (Amazon 2014 metadata) are accepted too."""
    for line_no, line in movielens.lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            record = _literal(line, path, line_no, err.msg)
        except RecursionError:
            raise DataError(path, "malformed JSON: nested too deeply", line=line_no) from None
        except ValueError as err:  # an integer past Python's digit limit
            raise DataError(path, f"malformed JSON: {err}", line=line_no) from None
        if not isinstance(record, dict):
            raise DataError(path, f"expected a JSON object, got {type(record).__name__}", line=line_no)
        yield line_no, whole_characters(record) if "\\" in line else record  # an emoji's half: U+FFFD


MAX_LITERAL_CHARS = 1 << 20  # Amazon 2014 metadata lines run to tens of kilobytes


def _literal(line: str, path: Path, line_no: int, json_error: str) -> object:
    """A Python-literal record (Amazon 2014), parsed with bounds: ``ast.literal_eval`` builds a syntax
    tree first, so an outsized or deeply nested line could exhaust memory or the stack."""
    text = line.strip()
    if len(text) > MAX_LITERAL_CHARS:
        raise DataError(path, f"malformed JSON: {json_error}; too long to read as a Python literal", line=line_no)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise DataError(path, f"malformed JSON: {json_error}", line=line_no) from None


def dat_fields(path: str | os.PathLike, count: int) -> Iterator[tuple[int, list[str]]]:
    """``::``-separated fields of each non-blank line of a MovieLens ``.dat`` file (UTF-8 or Latin-1)."""
    path = Path(path)
    for line_no, line in movielens.lines(path):
        fields = line.split("::")
        if len(fields) < count:
            raise DataError(path, f"expected {count} '::'-separated fields, got {len(fields)}", line=line_no)
        yield line_no, fields


def _number(value: object, path: Path, line: int, key: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DataError(path, f"key {key!r}: expected a number, got {value!r}", line=line) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise DataError(path, f"key {key!r}: expected a finite number, got {value!r}", line=line)
    return number


# Declared rating scales: every rating must lie within its source's (MovieLens has half stars since ML-10M).
AMAZON_SCALE = (1.0, 5.0)
MOVIELENS_SCALE = (0.5, 5.0)
LAST_TIMESTAMP = 4_102_444_800  # 2100-01-01 in seconds: anything later is a unit mistake or corruption


def rating_value(value: object, path: Path, line: int, key: str, scale: tuple[float, float]) -> float:
    """A finite rating within ``scale``, else an error naming file, line and key."""
    number = _number(value, path, line, key)
    if not scale[0] <= number <= scale[1]:
        raise DataError(
            path, f"key {key!r}: rating {value!r} is outside the scale {scale[0]:g}-{scale[1]:g}", line=line
        )
    return number


def timestamp_value(value: object, path: Path, line: int, key: str, per_second: int = 1) -> int:
    """Seconds since 1970 from a value in seconds (or ``per_second`` units), between 1970 and 2100."""
    seconds = _number(value, path, line, key) / per_second
    if not 0 <= seconds <= LAST_TIMESTAMP:
        unit = "seconds" if per_second == 1 else "milliseconds"
        raise DataError(
            path, f"key {key!r}: timestamp {value!r} is not a date between 1970 and 2100 in {unit}", line=line
        )
    return int(seconds)


def _string(record: dict, keys: tuple[str, ...], path: Path, line: int) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, (str, int)) and str(value).strip():
            return str(value)
    raise DataError(path, f"missing key {' or '.join(repr(k) for k in keys)}", line=line)


_END = object()  # what next() gives for a list walked to its end


def _text(value: object) -> str:
    """A text field: a string stripped, or a list's texts joined by spaces, however deeply nested (walked with
    a stack of its open lists: a stranger's file may nest them past Python's recursion limit)."""
    if not isinstance(value, list):
        return value.strip() if isinstance(value, str) else ""
    open_lists: list[tuple[Iterator, list[str]]] = [(iter(value), [])]
    while True:
        items, texts = open_lists[-1]
        child = next(items, _END)
        if isinstance(child, list):
            open_lists.append((iter(child), []))
        elif child is not _END:
            texts.append(child.strip() if isinstance(child, str) else "")
        else:
            open_lists.pop()
            if not open_lists:
                return " ".join(texts).strip()
            open_lists[-1][1].append(" ".join(texts).strip())


def read_reviews(path: str | os.PathLike) -> list[Review]:
    """Reviews from any of the formats (a MovieLens release folder too), in file order; an empty file is an error."""
    return list(iter_reviews(path))


def iter_reviews(path: str | os.PathLike) -> Iterator[Review]:
    """:func:`read_reviews` one at a time, for sources larger than memory."""
    path = movielens.release_folder_file(path, "ratings")
    count = 0
    if movielens.sniff(path) != "json":
        for record in movielens.read_ratings(path):
            rating = rating_value(record.rating, path, record.line, "rating", MOVIELENS_SCALE)
            timestamp = timestamp_value(record.timestamp, path, record.line, "timestamp")
            count += 1
            yield Review(record.user, record.item, rating, timestamp)
    else:
        for line, record in _records(path):
            if "user_id" in record:  # 2023 release, timestamps in milliseconds
                user = _string(record, ("user_id",), path, line)
                item = _string(record, ("parent_asin", "asin"), path, line)
                rating = rating_value(record.get("rating"), path, line, "rating", AMAZON_SCALE)
                timestamp = timestamp_value(record.get("timestamp"), path, line, "timestamp", per_second=1000)
                title, text = record.get("title"), record.get("text")
            elif "reviewerID" in record:  # 2014/2018 releases
                user = _string(record, ("reviewerID",), path, line)
                item = _string(record, ("asin",), path, line)
                rating = rating_value(record.get("overall"), path, line, "overall", AMAZON_SCALE)
                timestamp = timestamp_value(record.get("unixReviewTime"), path, line, "unixReviewTime")
                title, text = record.get("summary"), record.get("reviewText")
            else:
                raise DataError(
                    path, "not an Amazon review: needs 'user_id' (2023) or 'reviewerID' (2014/2018)", line=line
                )
            count += 1
            yield Review(user, item, rating, timestamp, _text(title), _text(text))
    if not count:
        raise DataError(path, "no reviews in file")


@dataclass(frozen=True)
class RatingScale:
    """The ratings a source uses: lowest, highest and the smallest step between them (1, or 0.5 for half stars)."""

    low: float
    high: float
    step: float

    @classmethod
    def seen(cls, lowest: float, highest: float, whole: bool) -> RatingScale:
        """The scale of ratings from ``lowest`` to ``highest``, ``whole`` when none is a fraction."""
        step = 1.0 if whole else 0.5
        # the release's scale, not just the values seen: MovieLens half stars run 0.5-5, whole stars 1-5
        return cls(min(lowest, step if step < 1 else 1.0), max(highest, 5.0), step)

    def as_list(self) -> list[float]:
        return [self.low, self.high, self.step]

    def for_rows(self) -> list[float] | None:
        """What rows carry: the scale, or None for whole stars 1-5 (rows and prompts without one)."""
        return None if self == WHOLE_STARS else self.as_list()


WHOLE_STARS = RatingScale(1.0, 5.0, 1.0)


def source_items(reviews: str | os.PathLike, items: str | os.PathLike | None) -> dict[str, CatalogItem]:
    """The ``--items`` file's items, else those of a MovieLens release folder given as ``--reviews``,
    else none (items then go by id)."""
    if items is None and not Path(reviews).is_dir():
        return {}
    return read_items(items or reviews)


def read_items(path: str | os.PathLike) -> dict[str, CatalogItem]:
    """Item id -> title, categories and description, from Amazon metadata, any MovieLens movies file
    (or release folder) or ``items.jsonl``."""
    path = movielens.release_folder_file(path, "items")
    items: dict[str, CatalogItem] = {}
    if movielens.sniff(path) != "json":
        for movie in movielens.read_movies(path).values():
            items[movie.id] = _item(movie.id, movie.title, movie.genres, "")
            items[movie.id].attributes["name"] = movie.name
            if movie.merged_ids:
                items[movie.id].attributes["merged_ids"] = movie.merged_ids
        return items
    for line, record in _records(path):
        item_id = _string(record, ("parent_asin", "asin", "id"), path, line)
        title = record.get("title")
        if not isinstance(title, str) or not title.strip():
            continue  # Amazon metadata has items without titles; reviews of them fall back to the id
        categories = record.get("categories", record.get("category", record.get("main_category", [])))
        if isinstance(categories, str):
            categories = [categories]
        flat = []  # 2014's lists of category paths, or a flat list; anything but a name (a list nested deeper) is none
        for entry in categories if isinstance(categories, list) else []:
            flat += [str(name) for name in (entry if isinstance(entry, list) else [entry]) if _is_name(name)]
        items[item_id] = _item(item_id, title.strip(), list(dict.fromkeys(flat)), _text(record.get("description")))
    return items


def _is_name(value: object) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _item(item_id: str, title: str, categories: list[str], description: str) -> CatalogItem:
    one_line = " ".join(CONTROL.sub(" ", title).split())  # rows take titles of one line: a stray tab or break goes
    return CatalogItem(item_id, one_line, {"categories": categories, "description": description})


def read_users(path: str | os.PathLike) -> dict[str, dict]:
    """User -> ``{"gender", "age", "occupation"}`` with names (ML-1M codes mapped), from ml-100k ``u.user``,
    ML-1M ``users.dat`` or a release folder; the zip code is dropped."""
    return movielens.read_users(movielens.release_folder_file(path, "users"))


# A full stop after the number ends the sentence ("I'd rate it 4."); only a point before a digit continues it.
_RATING = re.compile(r"(?<![\d.])(0\.5|[1-5](?:\.\d+)?)(?!\.?\d)")


def parse_rating(text: str) -> float | None:
    """The first rating on the widest scale we read (MovieLens 0.5-5, half stars) in a model's answer
    (``"4"``, ``"3.5 stars"``, ``"0.5"``, ``"I'd rate it 4."``), else None."""
    match = _RATING.search(text)
    return float(match.group(1)) if match else None


def rating_text(rating: float) -> str:
    """A rating as prompts and answers write it: ``4``, ``3.5``."""
    return str(int(rating)) if float(rating).is_integer() else f"{rating:.1f}"


def scale_text(scale: list[float] | None) -> str:
    """How a prompt states a rating scale: ``1 to 5``, or ``0.5 to 5 in half stars``."""
    low, high, step = scale or (1.0, 5.0, 1.0)
    steps = " in half stars" if step == 0.5 else f" in steps of {step:g}" if step != 1 else ""
    return f"{low:g} to {high:g}{steps}"


def item_title(items: dict[str, CatalogItem], item_id: str) -> str:
    """The item's title as a person writes it (what prompts and targets show), or ``item ID``."""
    info = items.get(item_id)
    return info.name if info else f"item {item_id}"


def merged_ids(catalog: dict[str, CatalogItem]) -> dict[str, str]:
    """Merged id -> the id kept for it: MovieLens titles listed twice (``merged_ids``)."""
    return {alias: i.id for i in catalog.values() for alias in i.attributes.get("merged_ids", [])}


def add_source_arguments(parser: argparse.ArgumentParser, example_domain: str) -> None:
    """The ``--reviews``/``--items``/``--domain``/``--out`` flags of the data_prep scripts that read these sources."""
    parser.add_argument("--reviews", required=True, help="reviews/ratings file (Amazon 2023, 2014/2018, MovieLens)")
    parser.add_argument("--items", default=None, help="item metadata / movies.dat (titles; else items go by id)")
    parser.add_argument("--domain", required=True, help=f"name of the category, e.g. {example_domain}")
    add_output_arguments(parser)
