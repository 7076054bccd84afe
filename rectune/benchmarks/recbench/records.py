"""The RecBench+ release's files: where they are and what their records hold.

Two layouts are read: the current one, ``<root>/dataset/<domain>/`` with the demographics queries in
``DemographicsBasedQuery.json``, and the earlier ``<root>/data/<domain>/`` with ``UserBasedQuery.json``.
Other files beside them (``.DS_Store``, ``movie_info.jsonl.zip``) are ignored.

Row ids are the release's own, so published answers line up: ``<domain>/<task>/<data_idx>`` for
condition queries and ``<domain>/<task>/<record>-<j>`` for profile queries, where ``j`` counts the
non-empty entries of the record's ``"query & ground true"`` list (the authors skip ``{}`` entries).
Every record is checked; a malformed one raises :class:`DataError` naming the file and the record.
"""

from __future__ import annotations

from pathlib import Path

from rectune.benchmarks.recbench.rows import NAME
from rectune.core.io import DataError, parse_json, present_file, read_text
from rectune.data.movielens import release_file

LAYOUTS = ("dataset", "data")  # current first
QUERY_FILES = {
    "explicit": ("ExplicitQuery.json",),
    "implicit": ("ImplicitQuery.json",),
    "misinformed": ("MisinformedQuery.json",),
    "interest": ("InterestBasedQuery.json",),
    "demographics": ("DemographicsBasedQuery.json", "UserBasedQuery.json"),
}


def domain_folder(root: str | Path, domain: str) -> Path:
    """``<root>/dataset/<domain>`` (current layout) or ``<root>/data/<domain>`` (earlier)."""
    candidates = [Path(root) / layout / domain for layout in LAYOUTS]
    for folder in candidates:
        if folder.is_dir():
            return folder
    looked = " and ".join(str(c) for c in candidates)
    if Path(root).is_dir() and release_file(root, "ratings") is not None:
        raise DataError(
            root,
            "is a MovieLens release, not a RecBench+ one: build RecBench+-style queries from it first "
            f"(python data_prep/build_benchmark.py --movielens {root} --out data/ml_release), then use --src "
            "data/ml_release (docs/movielens-amazon.md)",
        )
    raise DataError(root, f"not a RecBench+ release: no {domain} folder (looked in {looked})")


def query_file(folder: Path, task: str) -> Path | None:
    """The task's query file in ``folder`` under any of its release names, or None."""
    return next((folder / name for name in QUERY_FILES[task] if present_file(folder / name)), None)


def load_records(path: Path) -> list:
    records = parse_json(read_text(path), path)
    if not isinstance(records, list):
        raise DataError(path, f"expected a JSON list of records, got {type(records).__name__}")
    return records


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


def parse_records(task: str, records: list, domain: str, path: Path) -> list[dict]:
    """Turn release records into canonical row fields (ground-truth ids and history come later)."""
    subset_key = f"{domain}Subset"
    rows = []
    seen: set[str] = set()
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
            release_id = _data_idx(record, index, path)
            if release_id in seen:
                raise DataError(path, f"record {index}: data_idx {release_id} is used by an earlier record")
            seen.add(release_id)
            row = {
                **base,
                "id": f"{domain}/{task}/{release_id}",
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
            entries = _dicts(record["query & ground true"], path, index, "query & ground true")
            for j, entry in enumerate(entry for entry in entries if entry):
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


def _data_idx(record: dict, index: int, path: Path) -> str:
    """The record's ``data_idx`` (its position where a release has none), as the answers' id."""
    value = record.get("data_idx", index)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip():
        raise DataError(path, f"record {index}: key 'data_idx' must be an integer or a string, got {value!r}")
    return str(value).strip()


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
