"""Convert a RecBench+ release (``<root>/dataset/<domain>/`` or the earlier ``<root>/data/<domain>/``)
into catalog, KG and canonical rows.

The release layout and record formats are described in docs/data-recbench.md ("Data: RecBench+ → RecTune
files"); :mod:`~rectune.benchmarks.recbench.records` reads and checks the query files.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rectune.benchmarks.recbench.metrics import condition_bucket
from rectune.benchmarks.recbench.records import QUERY_FILES, domain_folder, load_records, parse_records, query_file
from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.core.io import DataError, RecTuneError, check_plain_files, numbered_jsonl, present_file
from rectune.data.catalog import KnowledgeGraph
from rectune.data.movielens import chronological
from rectune.data.ratings import MOVIELENS_SCALE, dat_fields, rating_value, timestamp_value
from rectune.data.titles import CatalogItem, TitleMatcher, title_key

log = logging.getLogger(__name__)


@dataclass
class Release:
    """Everything read from one domain of a release, before splitting."""

    domain: str
    catalog: list[CatalogItem]
    kg: KnowledgeGraph
    rows: list[RecBenchRow]
    # the --kg file's facts alone: the KG above also holds facts rebuilt from the queries' ground
    # truth, which a candidate retriever must not see
    independent_kg: KnowledgeGraph = field(default_factory=KnowledgeGraph)
    unresolved_titles: Counter = field(default_factory=Counter)
    missing_files: list[str] = field(default_factory=list)


def load_movies(path: Path) -> list[CatalogItem]:
    """MovieLens ``movies.dat``: ``id::title::genre|genre``."""
    return [
        CatalogItem(fields[0], fields[1], {"genres": [g for g in fields[2].split("|") if g]})
        for _, fields in dat_fields(path, 3)
    ]


def load_ratings(path: Path) -> dict[str, list[tuple[int, str]]]:
    """``user::item::rating::timestamp`` -> user -> [(timestamp, item)] by time (ties: numeric item id)."""
    by_user: dict[str, list[tuple[int, str]]] = {}
    for line, fields in dat_fields(path, 4):
        rating_value(fields[2], path, line, "rating", MOVIELENS_SCALE)
        by_user.setdefault(fields[0], []).append((timestamp_value(fields[3], path, line, "timestamp"), fields[1]))
    return {
        user: chronological(events, timestamp=lambda e: e[0], item=lambda e: e[1]) for user, events in by_user.items()
    }


def read_release(root: str | Path, domain: str, history_len: int = 20, extra_kg: str | Path | None = None) -> Release:
    """Read one domain of a RecBench+ checkout into catalog, KG and canonical rows."""
    folder = domain_folder(root, domain)
    check_plain_files(folder)  # a FIFO among the optional files would read as missing, a link to /dev/zero never end
    parsed: list[dict] = []
    missing = []
    for task in QUERY_FILES:
        path = query_file(folder, task)
        if path is None:
            missing.append(" or ".join(QUERY_FILES[task]))
            continue
        records = load_records(path)
        if not records:
            log.warning("%s: holds no records: no %s queries", path, task)
        parsed.extend(parse_records(task, records, domain, path))
    if missing:
        log.warning("%s: query files not found, skipped: %s", folder, ", ".join(missing))
    if not parsed:
        raise DataError(folder, "no query records found")

    ratings_path = folder / "ratings.dat"
    if present_file(ratings_path):
        ratings = load_ratings(ratings_path)
    else:
        ratings = {}
        log.warning("%s: not found: queries get no user history", ratings_path)
        missing.append(ratings_path.name)
    movies_path = folder / "movies.dat"
    if present_file(movies_path):
        catalog = load_movies(movies_path)
    else:
        catalog = _catalog_from_titles(parsed, ratings)
        if domain == "movie":  # books have no item file in the release
            log.warning("%s: not found: the catalog holds only titles the queries name, without genres", movies_path)
            missing.append(movies_path.name)
    matcher = TitleMatcher(catalog)
    ids = {item.id for item in catalog}

    kg = KnowledgeGraph()
    for item in catalog:
        for genre in item.attributes.get("genres", []):
            kg.add(item.id, "genre", genre)

    unresolved: Counter = Counter()
    rows = []
    for raw in parsed:
        given_ids = raw.pop("_ids")
        gt_ids = []
        for position, title in enumerate(raw["ground_truth"]):
            item_id = given_ids[position] if position < len(given_ids) and given_ids[position] in ids else None
            item_id = item_id or matcher.resolve(title)
            if item_id is None:
                unresolved[title] += 1
            elif item_id not in gt_ids:
                gt_ids.append(item_id)
        raw["ground_truth_ids"] = gt_ids
        for relation, value in raw.get("conditions", []):
            for item_id in gt_ids:
                kg.add(item_id, relation, value)
        for hint in raw.get("multihop") or []:
            _add_fact(kg, matcher, hint["item"], hint["relation"], hint["value"])
        for claim in raw.get("misinformation") or []:
            _add_fact(kg, matcher, claim["item"], claim["relation"], claim["true"])
        raw["history"] = _history(ratings.get(raw.get("source_user") or ""), set(gt_ids), matcher, history_len)
        rows.append(RecBenchRow.from_dict({k: v for k, v in raw.items() if v is not None}))
    independent_kg = KnowledgeGraph()
    if extra_kg:
        _merge_kg_file(kg, matcher, Path(extra_kg))
        _merge_kg_file(independent_kg, matcher, Path(extra_kg))
    return Release(domain, catalog, kg, rows, independent_kg, unresolved, missing)


def _add_fact(kg: KnowledgeGraph, matcher: TitleMatcher, title: str, relation: str, value: str) -> None:
    item_id = matcher.resolve(title) if title else None
    if item_id and relation and value:
        kg.add(item_id, relation, value)


def _history(events: list[tuple[int, str]] | None, exclude: set[str], matcher: TitleMatcher, limit: int) -> list[str]:
    """Most recent ``limit`` items of the user, minus the query's ground truth (H'_u = H_u minus G_q)."""
    if not events or limit <= 0:
        return []
    titles = []
    for _, item in reversed(events):
        item_id = item if item in matcher.items else matcher.resolve(item, fuzzy=False)
        if item_id is None or item_id in exclude:
            continue
        titles.append(matcher.items[item_id].title)
        if len(titles) == limit:
            break
    return titles[::-1]


def _catalog_from_titles(parsed: list[dict], ratings: dict[str, list[tuple[int, str]]]) -> list[CatalogItem]:
    """Books have no item file: the catalog is every distinct title the release mentions."""
    by_key: dict[str, CatalogItem] = {}

    def add(title: str, item_id: str | None = None) -> None:
        key = title_key(title)
        if key and key not in by_key:
            by_key[key] = CatalogItem(item_id or f"b{len(by_key)}", title)

    for raw in parsed:
        ids = raw["_ids"]
        for position, title in enumerate(raw["ground_truth"]):
            add(title, ids[position] if position < len(ids) else None)
        for fact in (raw.get("multihop") or []) + (raw.get("misinformation") or []):
            if fact["item"]:
                add(fact["item"])
    for events in ratings.values():
        for _, item in events:
            if not item.isdigit():
                add(item)
    taken: set[str] = set()
    items = []
    for item in by_key.values():
        if item.id in taken:  # an id given twice for different titles: keep the first
            item = CatalogItem(f"b{len(taken)}-{item.id}", item.title)
        taken.add(item.id)
        items.append(item)
    return items


def _merge_kg_file(kg: KnowledgeGraph, matcher: TitleMatcher, path: Path) -> None:
    """External KG: JSONL rows ``{"item_id" or "title", "relation", "value"}``."""
    for line, raw in numbered_jsonl(path):
        item_id = raw.get("item_id") or (matcher.resolve(raw["title"]) if isinstance(raw.get("title"), str) else None)
        if not isinstance(raw.get("relation"), str) or not isinstance(raw.get("value"), str):
            raise DataError(path, "needs string fields 'relation' and 'value'", line=line)
        if "item_id" not in raw and "title" not in raw:
            raise DataError(path, "needs 'item_id' or 'title'", line=line)
        if item_id:
            kg.add(str(item_id), raw["relation"], raw["value"])


def split_rows(rows: list[RecBenchRow], test_size: float, seed: int) -> tuple[list[RecBenchRow], list[RecBenchRow]]:
    """Per-task split by query text, so no text sits in both splits; deterministic for a seed."""
    if not 0.0 <= test_size <= 1.0:
        raise RecTuneError(f"test size must be in [0, 1], got {test_size}")
    groups: dict[str, dict[str, list[RecBenchRow]]] = {}
    for row in rows:
        groups.setdefault(row.task, {}).setdefault(row.query.strip().casefold(), []).append(row)
    test_texts: set[str] = set()
    for task in sorted(groups):
        texts = sorted(groups[task])
        random.Random(f"{seed}/{task}").shuffle(texts)
        test_texts.update(texts[: round(test_size * len(texts))])
    train = [r for r in rows if r.query.strip().casefold() not in test_texts]
    test = [r for r in rows if r.query.strip().casefold() in test_texts]
    return train, test


def stats(train: list[RecBenchRow], test: list[RecBenchRow], release: Release) -> dict:
    counts: dict[str, dict] = {}
    for split, rows in (("train", train), ("test", test)):
        for row in rows:
            task = counts.setdefault(row.task, {"train": 0, "test": 0, "by_conditions": {}})
            task[split] += 1
            bucket = condition_bucket(row)
            if bucket:
                per = task["by_conditions"].setdefault(bucket, {"train": 0, "test": 0})
                per[split] += 1
    return {
        "domain": release.domain,
        "catalog_items": len(release.catalog),
        "kg_triples": len(release.kg),
        "queries": {"train": len(train), "test": len(test)},
        "by_task": counts,
        "missing_files": release.missing_files,
        "unresolved_ground_truth": {
            "count": sum(release.unresolved_titles.values()),
            "titles": dict(release.unresolved_titles.most_common()),
        },
    }
