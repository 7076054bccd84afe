"""Convert a RecBench+ release (``<root>/data/<domain>/...``) into RecTune's files.

The release layout and record formats are described in the README ("Data: RecBench+ → RecTune
files"). Every record is checked; a malformed one raises :class:`DataError` naming the file and
the record's position.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rectune.benchmarks.recbench.metrics import condition_bucket
from rectune.benchmarks.recbench.rows import NAME, RecBenchRow
from rectune.catalog import KnowledgeGraph
from rectune.io import DataError, RecTuneError, numbered_jsonl, read_text
from rectune.movielens import chronological
from rectune.ratings import MOVIELENS_SCALE, dat_fields, rating_value, timestamp_value
from rectune.titles import CatalogItem, TitleMatcher, title_key

log = logging.getLogger(__name__)

QUERY_FILES = {
    "explicit": "ExplicitQuery.json",
    "implicit": "ImplicitQuery.json",
    "misinformed": "MisinformedQuery.json",
    "interest": "InterestBasedQuery.json",
    "demographics": "UserBasedQuery.json",
}


@dataclass
class Release:
    """Everything read from one domain of a release, before splitting."""

    domain: str
    catalog: list[CatalogItem]
    kg: KnowledgeGraph
    rows: list[RecBenchRow]
    unresolved_titles: Counter = field(default_factory=Counter)
    missing_files: list[str] = field(default_factory=list)


def _require(record: object, keys: tuple[str, ...], path: Path, index: int) -> dict:
    if not isinstance(record, dict):
        raise DataError(path, f"record {index}: expected an object, got {type(record).__name__}")
    for key in keys:
        if key not in record:
            raise DataError(path, f"record {index}: missing key {key!r}")
    return record


def _string_list(value: object, path: Path, index: int, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise DataError(path, f"record {index}: key {key!r} must be a list of strings")
    return [str(v) for v in value]


def _pairs(value: object, path: Path, index: int, key: str) -> list[list[str]]:
    if not isinstance(value, list) or not all(
        isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, (str, int)) for x in p) for p in value
    ):
        raise DataError(path, f"record {index}: key {key!r} must be a list of [relation, value] pairs")
    return [[str(r), str(v)] for r, v in value]


def _load_records(path: Path) -> list:
    try:
        records = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(path, f"malformed JSON: {err.msg}", line=err.lineno) from None
    if not isinstance(records, list):
        raise DataError(path, f"expected a JSON list of records, got {type(records).__name__}")
    return records


def parse_records(task: str, records: list, domain: str, path: Path) -> list[dict]:
    """Turn release records into canonical row fields (ground-truth ids and history come later)."""
    subset_key = f"{domain}Subset"
    rows = []
    for index, record in enumerate(records):
        base = {"benchmark": NAME, "domain": domain, "task": task}
        if task in ("explicit", "implicit", "misinformed"):
            query_keys = ("query",) if task == "misinformed" else ()
            record = _require(record, (subset_key, *query_keys), path, index)
            if task == "misinformed":
                query = record["query"]
            else:
                query = record.get("situational_description_query") or record.get("direct_description_query")
            if not isinstance(query, str) or not query.strip():
                raise DataError(path, f"record {index}: no query text")
            conditions = _pairs(record.get("sharedRelationships", []), path, index, "sharedRelationships")
            row = {
                **base,
                "id": f"{domain}/{task}/{index}",
                "query": query,
                "conditions": conditions,
                "condition_num": _count(record.get("condition_num", len(conditions)), path, index),
                "ground_truth": _string_list(record[subset_key], path, index, subset_key),
                "source_user": str(record["source_user"]) if record.get("source_user") is not None else None,
                "_ids": _string_list(record.get(f"{subset_key}Id", []), path, index, f"{subset_key}Id"),
            }
            if task == "implicit" and record.get("multihop_info"):
                fields = {"item": domain, "relation": "relation", "value": "person"}
                row["multihop"] = _facts(record["multihop_info"], fields, path, index, "multihop_info")
            if task == "misinformed":
                fields = {"item": domain, "relation": "relation", "claimed": "person", "true": "original person"}
                row["misinformation"] = _facts(record.get("misinformed", []), fields, path, index, "misinformed")
            rows.append(row)
        else:
            record = _require(record, ("query & ground true",), path, index)
            if task == "interest":
                profile = {"source_users": _string_list(record.get("source_users", []), path, index, "source_users")}
            else:
                profile = {k: record[k] for k in ("group_type", "group", "summary") if k in record}
            for j, entry in enumerate(_dicts(record["query & ground true"], path, index, "query & ground true")):
                subset = entry.get(f"{domain} subset")
                if not isinstance(entry.get("query"), str) or subset is None:
                    raise DataError(path, f"record {index}, query {j}: needs 'query' and '{domain} subset'")
                rows.append(
                    {
                        **base,
                        "id": f"{domain}/{task}/{index}-{j}",
                        "query": entry["query"],
                        "ground_truth": _string_list(subset, path, index, f"{domain} subset"),
                        "profile": {**profile, **({"reason": entry["reason"]} if entry.get("reason") else {})},
                        "_ids": [],
                    }
                )
    return rows


def _count(value: object, path: Path, index: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataError(path, f"record {index}: key 'condition_num' must be a non-negative integer, got {value!r}")
    return value


def _facts(value: object, fields: dict[str, str], path: Path, index: int, key: str) -> list[dict]:
    """Entries of ``value`` with ``fields`` renamed (ours -> the release's); each a string or absent."""
    facts = []
    for j, entry in enumerate(_dicts(value, path, index, key)):
        for name in fields.values():
            if not isinstance(entry.get(name, ""), str):
                found = type(entry[name]).__name__
                raise DataError(
                    path, f"record {index}: key {key!r}, entry {j}, field {name!r}: must be a string, got {found}"
                )
        facts.append({ours: entry.get(theirs, "") for ours, theirs in fields.items()})
    return facts


def _dicts(value: object, path: Path, index: int, key: str) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise DataError(path, f"record {index}: key {key!r} must be a list of objects")
    return value


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
    folder = Path(root) / "data" / domain
    if not folder.is_dir():
        raise DataError(folder, "not a RecBench+ domain folder (expected <root>/data/<domain>/)")
    parsed: list[dict] = []
    missing = []
    for task, name in QUERY_FILES.items():
        path = folder / name
        if not path.is_file():
            missing.append(name)
            continue
        records = _load_records(path)
        if not records:
            log.warning("%s: holds no records: no %s queries", path, task)
        parsed.extend(parse_records(task, records, domain, path))
    if missing:
        log.warning("%s: query files not found, skipped: %s", folder, ", ".join(missing))
    if not parsed:
        raise DataError(folder, "no query records found")

    ratings_path = folder / "ratings.dat"
    if ratings_path.is_file():
        ratings = load_ratings(ratings_path)
    else:
        ratings = {}
        log.warning("%s: not found: queries get no user history", ratings_path)
        missing.append(ratings_path.name)
    movies_path = folder / "movies.dat"
    if movies_path.is_file():
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
    if extra_kg:
        _merge_kg_file(kg, matcher, Path(extra_kg))
    return Release(domain, catalog, kg, rows, unresolved, missing)


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
