"""MovieLens releases as distributed, recognised by content (not by file name or suffix).

Layouts (files are UTF-8 or Latin-1; a release folder or any single file is accepted):

* **ml-100k**: ``u.data`` (``user<TAB>item<TAB>rating<TAB>timestamp``), ``u.item``
  (``id|title|release date|video date|IMDb URL|`` then 19 genre flags, Latin-1), ``u.genre``
  (``name|index``: the flags' names), ``u.user`` (``id|age|gender|occupation|zip``, real ages and
  occupation names).
* **ML-1M / ML-10M**: ``ratings.dat`` (``user::item::rating::timestamp``), ``movies.dat``
  (``id::title::Genre|Genre``), ML-1M ``users.dat`` (``user::gender::age::occupation::zip``, with
  age-band and occupation *codes*, mapped here to the names the ML-1M README gives), ML-10M
  ``tags.dat`` (``user::item::tag::timestamp``).
* **ml-latest(-small) / ML-20M / 25M / 32M**: ``ratings.csv`` (``userId,movieId,rating,timestamp``),
  ``movies.csv`` (``movieId,title,genres``, genres pipe-joined, titles quoted where they hold
  commas), ``tags.csv`` (``userId,movieId,tag,timestamp``); these releases have no user file.

Ratings keep file order; equal timestamps are ordered by the item's numeric id (:func:`chronological`).
Items listed twice under one title (ml-100k has 18 films with two ids) are one film: the lowest id
keeps it and records the others in ``merged_ids``; the rating store (:mod:`rectune.data.rating_store`)
moves their ratings onto it.
Prompts show titles the way a person writes them (:attr:`Movie.name`); the catalog keeps the
release's spelling for matching.
"""

from __future__ import annotations

import csv
import gzip
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rectune.core.io import (
    BOM,
    CONTROL,
    MAX_LINE_BYTES,
    DataError,
    check_plain_files,
    decode_text,
    present_file,
    require_file,
)
from rectune.data.item_ids import id_order, whole_number
from rectune.data.titles import CatalogItem, display_title

# ML-1M README: age bands and occupation codes
AGE_BANDS = {"1": "under 18", "18": "18-24", "25": "25-34", "35": "35-44", "45": "45-49", "50": "50-55", "56": "56+"}
OCCUPATIONS = {
    "0": "other", "1": "academic/educator", "2": "artist", "3": "clerical/admin", "4": "college/grad student",
    "5": "customer service", "6": "doctor/health care", "7": "executive/managerial", "8": "farmer",
    "9": "homemaker", "10": "K-12 student", "11": "lawyer", "12": "programmer", "13": "retired",
    "14": "sales/marketing", "15": "scientist", "16": "self-employed", "17": "technician/engineer",
    "18": "tradesman/craftsman", "19": "unemployed", "20": "writer",
}  # fmt: skip
GENRES_100K = (  # ml-100k u.genre, in flag order (used when the release has no u.genre)
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
)  # fmt: skip
NO_GENRE = {"(no genres listed)", "unknown"}

# what a release folder may hold, by role, in the order they are looked for
RELEASE_FILES = {
    "ratings": ("u.data", "ratings.dat", "ratings.csv"),
    "items": ("u.item", "movies.dat", "movies.csv"),
    "users": ("u.user", "users.dat"),
    "tags": ("tags.csv", "tags.dat"),
}
ACCEPTED = (
    "MovieLens ml-100k (u.data, u.item, u.user), ML-1M/10M (ratings.dat, movies.dat, users.dat, tags.dat), "
    "ml-latest/20M/25M/32M (ratings.csv, movies.csv, tags.csv), Amazon reviews 2014/2018 (JSON lines) and "
    "2023 (JSONL), RecTune items.jsonl"
)


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their numbers, each UTF-8 or else Latin-1 (ml-100k's u.item is Latin-1,
    older MovieLens and Amazon dumps mix them); ``.gz`` files are read compressed. Streamed: ML-25M's
    ratings.csv is 650 MB."""
    for number, line in enumerate(_text_lines(path), start=1):
        if line.strip():
            yield number, line


def _text_lines(path: Path) -> Iterator[str]:
    """Every line of the file, decoded one by one, without its line ending; one past io's ``MAX_LINE_BYTES`` stops
    in one line, read no further. No release has a line near it (Amazon's longest metadata lines are a few hundred
    kilobytes); a gzip file of one megabyte can hold a line of gigabytes, which read whole took the process past
    2 GiB."""
    require_file(path)
    number = 0
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as handle:
            for raw in iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""):
                number += 1  # for the errors below
                if len(raw) > MAX_LINE_BYTES:
                    raise DataError(path, f"a line longer than {MAX_LINE_BYTES:,} bytes: no release has one "
                                    "(a damaged file, or one inflating without end?)", line=number)  # fmt: skip
                line = decode_text(raw).rstrip("\r\n")
                yield line.removeprefix(BOM) if number == 1 else line
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(path, f"not a readable gzip file ({err})", line=number or None) from None


def sniff(path: Path) -> str:
    """The layout of one file from its first line: ``json``, ``dat``, ``tsv``, ``pipe`` or ``csv``."""
    first = next((line for _, line in lines(path)), None)
    if first is None:
        raise DataError(path, "empty file")
    text = first.strip()
    if text.startswith("{"):
        return "json"
    if "::" in text:
        return "dat"
    if "\t" in text:
        return "tsv"
    if text.split(",")[:2] in (["userId", "movieId"], ["movieId", "title"]):
        return "csv"
    if "|" in text:
        return "pipe"
    raise DataError(path, f"unknown format (first line {text[:60]!r}); accepted: {ACCEPTED}")


def release_file(path: str | os.PathLike, role: str) -> Path | None:
    """``path`` itself, or the file playing ``role`` inside a release folder (None when it has none)."""
    path = Path(path)
    if not path.is_dir():
        return path
    check_plain_files(path)
    found = [path / name for name in RELEASE_FILES[role] if present_file(path / name)]
    return found[0] if found else None


def release_folder_file(path: str | os.PathLike, role: str) -> Path:
    """Like :func:`release_file`, but a folder without that file is an error naming what it looked for."""
    found = release_file(path, role)
    if found is None:
        raise DataError(path, f"no {role} file in this folder (looked for {', '.join(RELEASE_FILES[role])}); accepted: "
                        f"{ACCEPTED}")  # fmt: skip
    return found


@dataclass
class Rating:
    user: str
    item: str
    rating: str
    timestamp: str
    line: int


def read_ratings(path: Path) -> Iterator[Rating]:
    """Raw rating records of a MovieLens ratings file in any layout, in file order (values unchecked)."""
    layout = sniff(path)
    separator = {"dat": "::", "tsv": "\t", "csv": ","}.get(layout)
    if separator is None:
        raise DataError(path, f"not a MovieLens ratings file ({layout}); accepted: {ACCEPTED}")
    if layout == "csv":
        rows = _csv_rows(path, ("userId", "movieId", "rating", "timestamp"))
    else:
        rows = ((n, line.split(separator)) for n, line in lines(path))
    for number, fields in rows:
        if len(fields) < 4:
            raise DataError(path, f"expected 4 {separator!r}-separated fields (user, item, rating, timestamp), "
                            f"got {len(fields)}", line=number)  # fmt: skip
        yield Rating(fields[0].strip(), fields[1].strip(), fields[2].strip(), fields[3].strip(), number)


def _csv_rows(path: Path, header: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    # line endings put back: a quoted field may span lines (csv's line_num is then the field's last line)
    text = (f"{line}\n" for line in _text_lines(path))
    reader = csv.reader(text)
    first = next(reader, None)
    if first and first[0].startswith("\ufeff"):
        first[0] = first[0][1:]
    if first is None or tuple(f.strip() for f in first[: len(header)]) != header:
        raise DataError(path, f"expected the header {','.join(header)}", line=1)
    for fields in reader:
        if fields:
            yield reader.line_num, fields


@dataclass
class Movie:
    id: str
    title: str  # the release's spelling: "English Patient, The (1996)"
    genres: list[str]
    year: int | None
    merged_ids: list[str] = field(default_factory=list)  # other ids the release lists this title under

    @property
    def name(self) -> str:
        """As a person writes it: ``The English Patient (1996)``, alternate titles dropped."""
        return display_title(self.title)


_YEAR = re.compile(r"\((\d{4})(?:[-–]\d{0,4})?\)\s*$")


def title_year(title: str) -> int | None:
    """``Toy Story (1995)`` -> 1995; TV series ranges (``(2004-2010)``) give the first year."""
    match = _YEAR.search(title)
    return int(match.group(1)) if match else None


def read_movies(path: Path) -> dict[str, Movie]:
    """Movies of ``u.item`` (with ``u.genre`` beside it), ``movies.dat`` or ``movies.csv``."""
    layout = sniff(path)
    movies: dict[str, Movie] = {}
    if layout == "pipe":
        names = _genre_names(path.parent / "u.genre")
        for number, line in lines(path):
            fields = line.split("|")
            if len(fields) < 5 + len(names):
                raise DataError(path, f"expected {5 + len(names)} '|'-separated fields (ml-100k u.item), "
                                f"got {len(fields)}", line=number)  # fmt: skip
            flags = fields[5 : 5 + len(names)]
            genres = [name for name, flag in zip(names, flags, strict=True) if flag.strip() == "1"]
            movies[fields[0]] = _movie(fields[0], fields[1], genres)
    elif layout in ("dat", "csv"):
        rows = ((n, line.split("::")) for n, line in lines(path)) if layout == "dat" else _csv_rows(
            path, ("movieId", "title", "genres")
        )  # fmt: skip
        for number, fields in rows:
            if len(fields) < 3:
                raise DataError(path, f"expected 3 fields (id, title, genres), got {len(fields)}", line=number)
            movies[fields[0].strip()] = _movie(fields[0].strip(), fields[1], fields[2].split("|"))
    else:
        raise DataError(path, f"not a MovieLens movies file ({layout}); accepted: {ACCEPTED}")
    return merge_duplicates({i: m for i, m in movies.items() if m.title})  # untitled: its ratings name "item ID"


def _movie(item_id: str, title: str, genres: list[str]) -> Movie:
    title = " ".join(CONTROL.sub(" ", title).split())  # rows take titles of one line, with no control character
    return Movie(item_id, title, [g.strip() for g in genres if g.strip() and g.strip() not in NO_GENRE],
                 title_year(title))  # fmt: skip


def _genre_names(path: Path) -> tuple[str, ...]:
    if not present_file(path):
        return GENRES_100K
    names = {}
    for number, line in lines(path):
        name, _, index = line.partition("|")
        position = whole_number(index.strip())
        if position is None:
            raise DataError(path, "expected name|index (ml-100k u.genre)", line=number)
        names[position] = name
    return tuple(names[i] for i in sorted(names))


def merge_duplicates(movies: dict[str, Movie]) -> dict[str, Movie]:
    """One movie per title (case-folded): the lowest id keeps it, the others' ids go to its ``merged_ids``."""
    kept: dict[str, Movie] = {}
    for movie in sorted(movies.values(), key=lambda m: id_order(m.id)):
        first = kept.setdefault(movie.title.casefold(), movie)
        if first is not movie:
            first.merged_ids.append(movie.id)
            first.genres = list(dict.fromkeys(first.genres + movie.genres))
    return {movie.id: movie for movie in kept.values()}


def canonical_ids(movies: dict[str, Movie]) -> dict[str, str]:
    """Every merged id -> the id that kept its title."""
    return {alias: movie.id for movie in movies.values() for alias in movie.merged_ids}


def read_users(path: Path) -> dict[str, dict]:
    """user -> ``{"gender", "age", "occupation"}`` with names, from ``u.user`` or ML-1M ``users.dat``.

    ML-1M codes become the names its README gives: age ``25`` -> ``25-34``, occupation ``12`` ->
    ``programmer``; ml-100k's real ages go into the same bands (``24`` -> ``18-24``), its
    occupations are names already.
    """
    layout = sniff(path)
    users = {}
    for number, line in lines(path):
        fields = line.split("::" if layout == "dat" else "|")
        if len(fields) < 4 or layout not in ("dat", "pipe"):
            raise DataError(path, "expected user::gender::age::occupation::zip (ML-1M users.dat) or "
                            "user|age|gender|occupation|zip (ml-100k u.user)", line=number)  # fmt: skip
        if layout == "dat":
            user, gender, age, occupation = fields[:4]
            users[user] = {"gender": gender, "age": AGE_BANDS.get(age, age),
                           "occupation": OCCUPATIONS.get(occupation, occupation)}  # fmt: skip
        else:
            user, age, gender, occupation = fields[:4]
            years = whole_number(age.strip())
            if years is None:
                raise DataError(path, f"age {age[:40]!r} is not a whole number (ml-100k u.user)", line=number)
            users[user] = {"gender": gender, "age": age_band(years), "occupation": occupation}
    return users


def age_band(age: int) -> str:
    """An age in years -> its ML-1M band name."""
    for start, band in sorted(((int(code), name) for code, name in AGE_BANDS.items()), reverse=True):
        if age >= start:
            return band
    return AGE_BANDS["1"]


def read_tags(path: Path) -> dict[str, Counter]:
    """item -> tag counts (case-folded, stripped) from ``tags.csv`` or ML-10M ``tags.dat``."""
    layout = sniff(path)
    if layout == "csv":
        rows = _csv_rows(path, ("userId", "movieId", "tag"))
    elif layout == "dat":
        rows = ((n, line.split("::")) for n, line in lines(path))
    else:
        raise DataError(path, f"not a MovieLens tags file ({layout})")
    tags: dict[str, Counter] = {}
    for number, fields in rows:
        if len(fields) < 3:
            raise DataError(path, "expected user, item, tag", line=number)
        tag = fields[2].strip().casefold()
        if tag:
            tags.setdefault(fields[1].strip(), Counter())[tag] += 1
    return tags


def chronological(events: list, timestamp=lambda e: e.timestamp, item=lambda e: e.item) -> list:
    """Events by time; equal timestamps by the item's numeric id (deterministic, whatever the file order)."""
    return sorted(events, key=lambda e: (timestamp(e), id_order(item(e))))


def tied_events(events: list, timestamp=lambda e: e.timestamp) -> int:
    """How many events share their timestamp with another event of the same sequence."""
    counts = Counter(timestamp(e) for e in events)
    return sum(n for n in counts.values() if n > 1)


def kg_items(movies: dict[str, Movie], tags: dict[str, Counter], max_tags: int = 10) -> list[CatalogItem]:
    """The release's own metadata as a KG: ``Genre``, ``Year`` and (ml-latest, ML-10M+) each item's most
    used ``Tag`` values."""
    items = []
    for movie in sorted(movies.values(), key=lambda m: id_order(m.id)):
        relations = {"Genre": movie.genres}
        if movie.year is not None:
            relations["Year"] = [str(movie.year)]
        counts = sum((tags.get(i, Counter()) for i in [movie.id, *movie.merged_ids]), Counter())
        top = [tag for tag, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        if top:
            relations["Tag"] = top[:max_tags]
        items.append(CatalogItem(movie.id, movie.title, {r: v for r, v in relations.items() if v}))
    return items
