"""The canonical benchmark rows: one JSON line per query, the contract between steps.

``data_prep`` writes these rows (``test.jsonl``), ``train`` builds prompts from the same
fields and ``evaluate`` scores completions against them. Every field is validated on
load, and a bad row raises :class:`rectune.io.DataError` naming file, line and field.
The ``benchmark`` field says which of the three row types a line is:
``recbench+`` (:class:`BenchmarkRow`), ``perrecbench`` (:class:`PerRecRow`) or
``llmrec`` (:class:`LLMRecRow`). One file holds rows of one benchmark.

RecBench+ fields (all required unless marked optional):

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

BENCHMARKS = ("recbench+", "perrecbench", "llmrec")
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
        for name, allowed in (("benchmark", ("recbench+",)), ("domain", DOMAINS), ("task", TASKS)):
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


class _Checker:
    """Typed access to a raw row's fields; every failure names file, line, row id and field."""

    def __init__(self, raw: dict, cls: type, path: str | os.PathLike, line: int | None):
        self.raw, self.path, self.line = raw, path, line
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise self.fail(unknown[0], "unknown field")

    def fail(self, name: str, message: str) -> DataError:
        row_id = self.raw.get("id") if isinstance(self.raw.get("id"), str) else None
        label = f"row {row_id!r}, " if row_id else ""
        return DataError(self.path, f"{label}field {name!r}: {message}", line=self.line)

    def string(self, name: str, allowed: tuple[str, ...] | None = None, optional: bool = False) -> str | None:
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, "missing" if value is None else f"must be a non-empty string, got {value!r}")
        if allowed and value not in allowed:
            raise self.fail(name, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def number(self, name: str, optional: bool = False) -> float | None:
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.fail(name, f"must be a number, got {value!r}")
        return value

    def objects(self, name: str, required_keys: tuple[str, ...], optional: bool = False) -> list[dict]:
        value = self.raw.get(name, [] if optional else None)
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(name, "missing" if value is None else "must be a list of objects")
        for index, entry in enumerate(value):
            for key in required_keys:
                if key not in entry:
                    raise self.fail(name, f"entry {index} has no {key!r}")
        return value

    def object(self, name: str, required_keys: tuple[str, ...]) -> dict:
        value = self.raw.get(name)
        if not isinstance(value, dict):
            raise self.fail(name, "missing" if value is None else "must be an object")
        for key in required_keys:
            if key not in value:
                raise self.fail(name, f"has no {key!r}")
        return value


PERREC_TASKS = ("pointwise", "pairwise", "listwise")
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass
class PerRecRow:
    """A PerRecBench prompt: one user (pointwise), two (pairwise) or the whole group (listwise).

    ==================  ===============================================================
    ``id``              ``"<group>/<task>[/<user labels>]"``
    ``benchmark``       ``"perrecbench"``
    ``domain``          the source's category, e.g. ``"beauty"`` or ``"movies"``
    ``task``            ``pointwise``, ``pairwise`` or ``listwise``
    ``group``           the group id; the rows of one group and task are scored together
    ``group_size``      users in the group (2-4)
    ``difficulty``      ``easy``, ``medium`` or ``hard`` (see ``rectune.perrec``)
    ``item``            the shared item ``{"id", "title", "categories", "description"}``
    ``users``           the users in the prompt, in prompt order: ``{"label", "user",
                        "mean_rating", "history": [{"title", "rating"}], "profile",
                        "rating", "relative_rating"}``; the last two are the truth
    ``answer``          the reference answer (SFT target)
    ==================  ===============================================================
    """

    id: str
    benchmark: str
    domain: str
    task: str
    group: str
    group_size: int
    difficulty: str
    item: dict
    users: list[dict]
    answer: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> PerRecRow:
        check = _Checker(raw, cls, path, line)
        users = check.objects("users", ("label", "user", "mean_rating", "history", "rating", "relative_rating"))
        if not users:
            raise check.fail("users", "must not be empty")
        size = check.number("group_size")
        if not isinstance(size, int) or size < 2:
            raise check.fail("group_size", f"must be an integer >= 2, got {size!r}")
        return cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", ("perrecbench",)),
            domain=check.string("domain"),
            task=check.string("task", PERREC_TASKS),
            group=check.string("group"),
            group_size=size,
            difficulty=check.string("difficulty", DIFFICULTIES),
            item=check.object("item", ("id", "title")),
            users=users,
            answer=check.string("answer"),
        )


LLMREC_TASKS = ("rating", "sequential", "direct", "explanation", "summarization")


@dataclass
class LLMRecRow:
    """An LLMRec query: one user, one task.

    ==================  ===============================================================
    ``id``              ``"<task>/<user>"``
    ``benchmark``       ``"llmrec"``
    ``domain``          the source's category, e.g. ``"beauty"``
    ``task``            ``rating``, ``sequential``, ``direct``, ``explanation`` or
                        ``summarization``
    ``user``            the user id
    ``history``         the user's earlier items, oldest first: ``{"id", "title", "rating"}``
    ``item``            the held-out item ``{"id", "title"}`` (the one to rate, recommend,
                        explain or summarise)
    ``candidates``      optional: items to choose from ``{"id", "title"}`` (direct, and
                        sequential with ``--candidates``), the held-out item among them
    ``target``          the reference answer: the rating, the item's title, the review
                        text or the review title
    ``review``          optional: the held-out review's text (explanation, summarisation)
    ==================  ===============================================================
    """

    id: str
    benchmark: str
    domain: str
    task: str
    user: str
    history: list[dict]
    item: dict
    target: str
    candidates: list[dict] | None = None
    review: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> LLMRecRow:
        check = _Checker(raw, cls, path, line)
        row = cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", ("llmrec",)),
            domain=check.string("domain"),
            task=check.string("task", LLMREC_TASKS),
            user=check.string("user"),
            history=check.objects("history", ("id", "title")),
            item=check.object("item", ("id", "title")),
            target=check.string("target"),
            candidates=check.objects("candidates", ("id", "title")) if "candidates" in raw else None,
            review=check.string("review", optional=True),
        )
        if row.task == "rating":
            try:
                float(row.target)
            except ValueError:
                raise check.fail("target", f"a rating task needs a numeric target, got {row.target!r}") from None
        return row


ROW_TYPES: dict[str, type] = {"recbench+": BenchmarkRow, "perrecbench": PerRecRow, "llmrec": LLMRecRow}
Row = BenchmarkRow | PerRecRow | LLMRecRow


def load_rows(path: str | os.PathLike) -> list[Row]:
    """Load and validate canonical rows of one benchmark; ids must be unique."""
    rows = []
    seen: dict[str, int] = {}
    benchmark = None
    for line, raw in numbered_jsonl(path):
        name = raw.get("benchmark")
        if name not in ROW_TYPES:
            raise DataError(path, f"field 'benchmark': must be one of {', '.join(BENCHMARKS)}, got {name!r}", line=line)
        if benchmark is None:
            benchmark = name
        elif name != benchmark:
            raise DataError(path, f"field 'benchmark': {name!r} rows mixed with {benchmark!r} rows", line=line)
        row = ROW_TYPES[name].from_dict(raw, path=path, line=line)
        if row.id in seen:
            raise DataError(path, f"field 'id': duplicate id {row.id!r} (first on line {seen[row.id]})", line=line)
        seen[row.id] = line
        rows.append(row)
    return rows
