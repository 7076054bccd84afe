"""The canonical benchmark row: one JSON line per query, the contract between steps.

``data_prep`` writes these rows (``test.jsonl``), ``train`` builds prompts from the same
fields and ``evaluate`` scores completions against them. Every field is validated on
load, and a bad row raises :class:`rectune.io.DataError` naming file, line and field.

Fields (all required unless marked optional):

========================  =================================================================
``id``                    unique string, e.g. ``"movie/explicit/17"``
``benchmark``             ``"recbench+"``
``domain``                ``"movie"`` or ``"book"``
``task``                  ``explicit``, ``implicit``, ``misinformed`` (condition-based) or
                          ``interest``, ``demographics`` (profile-based)
``query``                 the user's natural-language request
``conditions``            list of ``[relation, value]`` pairs (empty for profile tasks)
``condition_num``         number of conditions (``len(conditions)`` unless the source says)
``misinformation``        optional list of ``{"item", "relation", "claimed", "true"}``
``multihop``              optional list of ``{"item", "relation", "value"}``
``source_user``           optional string, the user whose history the query came from
``profile``               optional object: interest reason or demographic group/summary
``history``               list of item titles the user consumed (may be empty)
``ground_truth``          non-empty list of ground-truth titles as the release spells them
``ground_truth_ids``      catalog ids the titles resolve to (unresolved ones are absent)
========================  =================================================================
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from rectune.io import DataError, numbered_jsonl

BENCHMARKS = ("recbench+",)
DOMAINS = ("movie", "book")
CONDITION_TASKS = ("explicit", "implicit", "misinformed")
PROFILE_TASKS = ("interest", "demographics")
TASKS = CONDITION_TASKS + PROFILE_TASKS


@dataclass
class BenchmarkRow:
    id: str
    benchmark: str
    domain: str
    task: str
    query: str
    ground_truth: list[str]
    ground_truth_ids: list[str] = field(default_factory=list)
    conditions: list[list[str]] = field(default_factory=list)
    condition_num: int = 0
    history: list[str] = field(default_factory=list)
    misinformation: list[dict] | None = None
    multihop: list[dict] | None = None
    source_user: str | None = None
    profile: dict | None = None

    @property
    def is_condition_based(self) -> bool:
        return self.task in CONDITION_TASKS

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> BenchmarkRow:
        """Validate ``raw`` and build a row; errors name ``path``, ``line`` and the field."""

        def fail(name: str, message: str) -> DataError:
            row_id = raw.get("id") if isinstance(raw.get("id"), str) else None
            label = f"row {row_id!r}, " if row_id else ""
            return DataError(path, f"{label}field {name!r}: {message}", line=line)

        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise fail(unknown[0], "unknown field")
        for name in ("id", "benchmark", "domain", "task", "query", "ground_truth"):
            if name not in raw:
                raise fail(name, "missing")
        values: dict[str, Any] = {}
        for name in ("id", "benchmark", "domain", "task", "query"):
            if not isinstance(raw[name], str) or not raw[name].strip():
                raise fail(name, f"must be a non-empty string, got {raw[name]!r}")
            values[name] = raw[name]
        for name, allowed in (("benchmark", BENCHMARKS), ("domain", DOMAINS), ("task", TASKS)):
            if values[name] not in allowed:
                raise fail(name, f"must be one of {', '.join(allowed)}, got {values[name]!r}")
        for name in ("ground_truth", "ground_truth_ids", "history"):
            value = raw.get(name, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(name, "must be a list of strings")
            values[name] = value
        if not values["ground_truth"]:
            raise fail("ground_truth", "must not be empty")
        conditions = raw.get("conditions", [])
        if not isinstance(conditions, list) or not all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c) for c in conditions
        ):
            raise fail("conditions", "must be a list of [relation, value] string pairs")
        values["conditions"] = conditions
        condition_num = raw.get("condition_num", len(conditions))
        if not isinstance(condition_num, int) or isinstance(condition_num, bool) or condition_num < 0:
            raise fail("condition_num", f"must be a non-negative integer, got {condition_num!r}")
        values["condition_num"] = condition_num
        for name in ("misinformation", "multihop"):
            value = raw.get(name)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, dict) for v in value)):
                raise fail(name, "must be a list of objects")
            values[name] = value
        if raw.get("source_user") is not None and not isinstance(raw["source_user"], str):
            raise fail("source_user", "must be a string")
        values["source_user"] = raw.get("source_user")
        if raw.get("profile") is not None and not isinstance(raw["profile"], dict):
            raise fail("profile", "must be an object")
        values["profile"] = raw.get("profile")
        return cls(**values)


def load_rows(path: str | os.PathLike) -> list[BenchmarkRow]:
    """Load and validate canonical rows; ids must be unique."""
    rows = []
    seen: dict[str, int] = {}
    for line, raw in numbered_jsonl(path):
        row = BenchmarkRow.from_dict(raw, path=path, line=line)
        if row.id in seen:
            raise DataError(path, f"field 'id': duplicate id {row.id!r} (first on line {seen[row.id]})", line=line)
        seen[row.id] = line
        rows.append(row)
    return rows
