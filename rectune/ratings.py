"""Ratings and reviews from public sources, read into one shape for PerRecBench and LLMRec.

Three source formats, recognised per file (``.gz`` files are read compressed):

* **Amazon reviews 2023** (JSONL): reviews ``{user_id, parent_asin|asin, rating, timestamp
  (ms), title, text}``; metadata ``{parent_asin, title, categories, description, ...}``.
* **Amazon reviews 2014/2018** (one JSON object per line; 2014 metadata lines are Python
  literals): reviews ``{reviewerID, asin, overall, unixReviewTime (s), summary, reviewText}``;
  metadata ``{asin, title, category|categories, description}``.
* **MovieLens** ``.dat``: ``ratings.dat`` ``user::item::rating::timestamp`` (s) and
  ``movies.dat`` ``id::title::genre|genre``.

Every record is checked; a bad one raises :class:`DataError` naming the file, line and key.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rectune.io import DataError, read_text


@dataclass
class Review:
    user: str
    item: str
    rating: float
    timestamp: int  # seconds
    title: str = ""  # review title / summary
    text: str = ""


@dataclass
class ItemInfo:
    id: str
    title: str
    categories: list[str] = field(default_factory=list)
    description: str = ""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    if not path.is_file():
        raise DataError(path, "file not found")
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    else:
        yield from enumerate(read_text(path).splitlines(), start=1)


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """JSON objects, one per line; Python-literal lines (Amazon 2014 metadata) are accepted too."""
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            try:
                record = ast.literal_eval(line.strip())
            except (ValueError, SyntaxError):
                raise DataError(path, f"malformed JSON: {err.msg}", line=line_no) from None
        if not isinstance(record, dict):
            raise DataError(path, f"expected a JSON object, got {type(record).__name__}", line=line_no)
        yield line_no, record


def _dat_fields(path: Path, count: int) -> Iterator[tuple[int, list[str]]]:
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        fields = line.rstrip("\n").split("::")
        if len(fields) < count:
            raise DataError(path, f"expected {count} '::'-separated fields, got {len(fields)}", line=line_no)
        yield line_no, fields


def _number(value: object, path: Path, line: int, key: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DataError(path, f"key {key!r}: expected a number, got {value!r}", line=line) from None
    if number != number:  # NaN
        raise DataError(path, f"key {key!r}: expected a number, got NaN", line=line)
    return number


def _string(record: dict, keys: tuple[str, ...], path: Path, line: int) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, (str, int)) and str(value).strip():
            return str(value)
    raise DataError(path, f"missing key {' or '.join(repr(k) for k in keys)}", line=line)


def _text(value: object) -> str:
    if isinstance(value, list):
        return " ".join(_text(v) for v in value).strip()
    return value.strip() if isinstance(value, str) else ""


def read_reviews(path: str | os.PathLike) -> list[Review]:
    """Reviews from any of the three formats, in file order; an empty file is an error."""
    path = Path(path)
    reviews: list[Review] = []
    if ".dat" in path.suffixes:
        for line, fields in _dat_fields(path, 4):
            rating = _number(fields[2], path, line, "rating")
            reviews.append(Review(fields[0], fields[1], rating, int(_number(fields[3], path, line, "timestamp"))))
    else:
        for line, record in _records(path):
            if "user_id" in record:  # 2023 release, timestamps in milliseconds
                user = _string(record, ("user_id",), path, line)
                item = _string(record, ("parent_asin", "asin"), path, line)
                rating = _number(record.get("rating"), path, line, "rating")
                timestamp = int(_number(record.get("timestamp"), path, line, "timestamp") // 1000)
                title, text = record.get("title"), record.get("text")
            elif "reviewerID" in record:  # 2014/2018 releases
                user = _string(record, ("reviewerID",), path, line)
                item = _string(record, ("asin",), path, line)
                rating = _number(record.get("overall"), path, line, "overall")
                timestamp = int(_number(record.get("unixReviewTime"), path, line, "unixReviewTime"))
                title, text = record.get("summary"), record.get("reviewText")
            else:
                raise DataError(
                    path, "not an Amazon review: needs 'user_id' (2023) or 'reviewerID' (2014/2018)", line=line
                )
            reviews.append(Review(user, item, rating, timestamp, _text(title), _text(text)))
    if not reviews:
        raise DataError(path, "no reviews in file")
    return reviews


def read_items(path: str | os.PathLike) -> dict[str, ItemInfo]:
    """Item id -> title, categories and description, from metadata, ``movies.dat`` or ``items.jsonl``."""
    path = Path(path)
    items: dict[str, ItemInfo] = {}
    if ".dat" in path.suffixes:
        for _, fields in _dat_fields(path, 3):
            items[fields[0]] = ItemInfo(fields[0], fields[1].strip(), [g for g in fields[2].split("|") if g])
        return items
    for line, record in _records(path):
        item_id = _string(record, ("parent_asin", "asin", "id"), path, line)
        title = record.get("title")
        if not isinstance(title, str) or not title.strip():
            continue  # Amazon metadata has items without titles; reviews of them fall back to the id
        categories = record.get("categories", record.get("category", record.get("main_category", [])))
        if isinstance(categories, str):
            categories = [categories]
        flat = []
        for entry in categories if isinstance(categories, list) else []:
            flat += [str(c) for c in entry] if isinstance(entry, list) else [str(entry)]
        items[item_id] = ItemInfo(item_id, title.strip(), list(dict.fromkeys(flat)), _text(record.get("description")))
    return items


def item_title(items: dict[str, ItemInfo], item_id: str) -> str:
    info = items.get(item_id)
    return info.title if info else f"item {item_id}"


def add_source_arguments(parser: argparse.ArgumentParser, example_domain: str) -> None:
    """The ``--reviews``/``--items``/``--domain``/``--out`` flags of the data_prep scripts that read these sources."""
    parser.add_argument("--reviews", required=True, help="reviews/ratings file (Amazon 2023, 2014/2018, MovieLens)")
    parser.add_argument("--items", default=None, help="item metadata / movies.dat (titles; else items go by id)")
    parser.add_argument("--domain", required=True, help=f"name of the category, e.g. {example_domain}")
    parser.add_argument("--out", required=True, help="output folder")
