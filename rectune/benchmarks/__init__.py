"""The benchmark interface and the one registry of benchmarks.

A benchmark is one package under ``rectune/benchmarks/`` that owns everything specific to it:
its row type and validation, building its data from sources, prompts, SFT/RFT examples,
scoring, its metrics' names, scales and directions, and its rewards. Everything else
(evaluation, scoring, training's data checks, GRPO's reward lookup, compare, W&B logging) finds
a benchmark here by the ``benchmark`` field of its rows and never names one.

Adding a benchmark: write a package with a :class:`Benchmark` subclass and add one line to
``BUILTIN`` (or call :func:`register` with an instance from your own code); see CONTRIBUTING.md
"Adding a benchmark".
"""

from __future__ import annotations

import functools
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rectune.core.io import DataError, RecTuneError, numbered_jsonl
from rectune.data.completions import DEFAULT_LIMITS, CompletionLimits

# name -> module holding ``BENCHMARK``; imported on first use, so importing the registry is cheap.
BUILTIN = {
    "recbench+": "rectune.benchmarks.recbench",
    "perrecbench": "rectune.benchmarks.perrec",
    "llmrec": "rectune.benchmarks.llmrec",
}
# Rows and RFT examples written before rows named their benchmark are RecBench+ rows.
UNNAMED_ROWS = "recbench+"

RewardFunc = Callable[..., list[float | None]]


@dataclass(frozen=True)
class MetricSpec:
    """How to show a metric: its label, its scale and which direction is better.

    Scales: ``unit`` (0 to 1), ``signed`` (-1 to 1, e.g. Kendall's τ), ``percent`` (0 to 100,
    e.g. BLEU/ROUGE), ``error`` (0 upwards, e.g. RMSE) and ``count`` (0 upwards, e.g. titles per answer).
    """

    label: str
    scale: str = "unit"
    higher_is_better: bool = True

    SCALES: ClassVar[dict[str, tuple[float, float | None]]] = {
        "unit": (0.0, 1.0),
        "signed": (-1.0, 1.0),
        "percent": (0.0, 100.0),
        "error": (0.0, None),
        "count": (0.0, None),
    }

    @property
    def limits(self) -> tuple[float, float | None]:
        """Axis limits of the scale; ``None`` means open-ended."""
        return self.SCALES[self.scale]


@dataclass
class Scored:
    """What scoring produces in one pass: the report, and one table record per query (or group) given as
    the records or as what builds them, built on first reading (``evaluate/score.py`` writes none)."""

    report: dict
    table_records: list[dict] | Callable[[], list[dict]]

    @functools.cached_property
    def table(self) -> list[dict]:
        return self.table_records() if callable(self.table_records) else self.table_records


class Resources:
    """Files a benchmark reads beside its data (catalog, KG), each loaded once, on first use."""

    def __init__(
        self,
        data: str | os.PathLike,
        catalog: str | os.PathLike | None = None,
        kg: str | os.PathLike | None = None,
        fuzzy_cutoff: float = 90.0,
        limits: CompletionLimits = DEFAULT_LIMITS,
        convention: str = "default",
        top_k: int | None = None,
        variant: dict | None = None,
    ):
        self.data, self.catalog_path, self.kg_path, self.fuzzy_cutoff = data, catalog, kg, fuzzy_cutoff
        self.limits = limits
        # which metric definitions to score with: "default", or a benchmark's named alternative (RecBench+'s
        # "official", the authors' evaluator); top_k is the fixed-K prompt's K where that convention uses it
        self.convention, self.top_k = convention, top_k
        self.variant = variant or {}  # the prompt options the answers were asked with (data_prep's stats.json)
        self._matcher = self._kg = None

    @classmethod
    def loaded(
        cls, matcher: Any = None, kg: Any = None, limits: CompletionLimits = DEFAULT_LIMITS, **options: Any
    ) -> Resources:
        """Resources already in memory (tests, notebooks); ``options``: ``top_k``, ``variant``, ``convention``."""
        resources = cls("<memory>", limits=limits, **options)
        resources._matcher, resources._kg = matcher, kg
        return resources

    def matcher(self) -> Any:
        """A :class:`~rectune.data.titles.TitleMatcher` over ``catalog.jsonl``."""
        if self._matcher is None:
            from rectune.data.catalog import beside, load_catalog
            from rectune.data.titles import TitleMatcher

            items = load_catalog(beside(self.data, "catalog.jsonl", self.catalog_path))
            self._matcher = TitleMatcher(items, fuzzy_cutoff=self.fuzzy_cutoff, limits=self.limits)
        return self._matcher

    def mentions_capped(self) -> int:
        """Completions whose parsed titles were cut to ``limits.max_mentions`` (0 when none were parsed)."""
        return self._matcher.capped if self._matcher is not None else 0

    def files(self) -> list[Path]:
        """The catalog and KG files there are, as :meth:`matcher` and :meth:`kg` would read them."""
        given = ((self.catalog_path, "catalog.jsonl"), (self.kg_path, "kg.jsonl"))
        paths = [Path(path) if path else Path(self.data).parent / name for path, name in given]
        return [path for path in paths if path.is_file()]

    def kg(self) -> Any:
        """The :class:`~rectune.data.catalog.KnowledgeGraph` of ``kg.jsonl``."""
        if self._kg is None:
            from rectune.data.catalog import beside, load_kg

            self._kg = load_kg(beside(self.data, "kg.jsonl", self.kg_path))
        return self._kg


class Benchmark(ABC):
    """One benchmark: rows, prompts, examples, scoring, metrics and rewards.

    Subclasses set the class attributes and implement :meth:`messages`, :meth:`answer`,
    :meth:`labels`, :meth:`score` and :meth:`format_table`.
    """

    name: ClassVar[str]
    row_type: ClassVar[type]  # a dataclass with ``from_dict(raw, path=, line=)`` and ``to_dict()``
    tasks: ClassVar[tuple[str, ...]]
    metrics: ClassVar[dict[str, MetricSpec]]  # the report's metrics, in display order
    rewards: ClassVar[dict[str, RewardFunc]]  # GRPO rewards by name, in TRL's signature
    default_rewards: ClassVar[tuple[str, ...]]
    label_columns: ClassVar[tuple[str, ...]]  # RFT columns the rewards read
    # metric -> function applied to the mean of the unit values (RMSE: the root of the mean squared error)
    metric_transforms: ClassVar[dict[str, Callable[[float], float]]] = {}
    conventions: ClassVar[tuple[str, ...]] = ("default",)  # metric conventions :meth:`score` knows
    # local generation's default --max-new-tokens: room for the longest reference answer, no more (every
    # batch decodes until its longest answer ends, so a generous limit costs time on a CPU)
    answer_tokens: ClassVar[int] = 256
    # recommenders without an LLM (rectune.benchmarks.baselines.Baseline), each scored like a checkpoint
    baselines: ClassVar[tuple] = ()
    baseline_metric: ClassVar[str] = ""  # the ``overall`` metric a baseline's hyper-parameters maximise

    def read_line(self, raw: dict, path: str | os.PathLike = "<row>", line: int | None = None) -> list[Any]:
        """The validated rows one stored line holds (one row; PerRecBench: a group's rows in every format);
        errors name file, line and field."""
        return [self.row_type.from_dict(raw, path=path, line=line)]

    @abstractmethod
    def messages(self, row: Any, variant: dict) -> list[dict]:
        """System and user chat messages for ``row``; ``variant`` holds prompt options (may be empty)."""

    @abstractmethod
    def answer(self, row: Any, variant: dict) -> str:
        """The reference answer, the SFT target, for the prompt ``variant`` asks for."""

    @abstractmethod
    def labels(self, rows: list[Any]) -> list[dict]:
        """Per row, the ``label_columns`` values its rewards read (rows of one split, so groups can be seen)."""

    def label_problem(self, labels: dict) -> str | None:
        """What makes one RFT example's label columns unusable by the rewards (``field 'NAME': …``), or None.
        Checked for every example before training, since a reward meets a bad label only mid-run. Default:
        every ``label_columns`` present; the built-in benchmarks check each column's shape too."""
        missing = next((name for name in self.label_columns if name not in labels), None)
        return f"field {missing!r}: missing (needed by the rewards)" if missing else None

    @abstractmethod
    def score(self, rows: list[Any], predictions: dict[str, str], resources: Resources) -> Scored:
        """Score every row's prediction once: the report (``overall``, ``by_task``, ...) and the table."""

    @abstractmethod
    def format_table(self, report: dict) -> str:
        """The report as a Markdown table."""

    def load_scoring_files(self, tasks: set[str], resources: Resources) -> None:
        """Load the files :meth:`score` and the rewards read beside the data for queries of ``tasks`` (catalog, KG),
        so that one missing or malformed stops an evaluation before it generates, not once hours of answers are in,
        and a GRPO run before its model loads, not at its first reward."""
        return None  # a benchmark scored from its rows alone (PerRecBench) reads nothing beside them

    def unit_values(self, record: dict) -> dict[str, float | None]:
        """One ``per_query`` record's values whose mean over records (then ``metric_transforms``) is each
        metric; None leaves the record out of that metric. The confidence intervals of ``compare.py
        --baseline`` resample these. Default: the record's own fields named like the metrics."""
        return {metric: record.get(metric) for metric in self.metrics}

    def tuning_value(self, report: dict) -> float:
        """How good a report is when a baseline's hyper-parameters are chosen on validation (higher is better)."""
        value = report["overall"].get(self.baseline_metric)
        return float(value) if value is not None else float("-inf")

    def misled_lines(self, completion: str, labels: dict, resources: Resources) -> list[bool] | None:
        """Per line of ``completion``: whether it names a wrong pick, for GRPO's reasoning-aware advantage
        (``labels``: the row's RFT label columns). None: this benchmark cannot tell."""
        return None

    def item_gains(self, completion: str, labels: dict, resources: Resources) -> list[tuple[int, float]] | None:
        """Per item of a ranked answer, in order: the character offset where it ends and its gain (the share of
        the answer's NDCG@K it earns), for GRPO's rank-level advantage. None: this benchmark has no ranked
        answers."""
        return None

    def sft_example(self, row: Any, variant: dict) -> dict:
        """A conversational example as TRL's SFTTrainer reads it (loss on the assistant turn)."""
        return {"messages": [*self.messages(row, variant), {"role": "assistant", "content": self.answer(row, variant)}]}

    def rft_examples(self, rows: list[Any], variant: dict) -> list[dict]:
        """Prompts plus the labels GRPOTrainer forwards to the rewards."""
        return [
            {"prompt": self.messages(row, variant), "id": row.id, "benchmark": self.name, **labels}
            for row, labels in zip(rows, self.labels(rows), strict=True)
        ]


_registry: dict[str, Benchmark] = {}


def register(benchmark: Benchmark) -> Benchmark:
    """Make ``benchmark`` available by its name (rows name it in their ``benchmark`` field)."""
    _registry[benchmark.name] = benchmark
    return benchmark


def names() -> list[str]:
    return list(dict.fromkeys([*BUILTIN, *_registry]))


def get_benchmark(name: str | None) -> Benchmark:
    """The benchmark called ``name`` (``None``: rows written before rows named their benchmark)."""
    name = UNNAMED_ROWS if name is None else name
    if not isinstance(name, str):
        raise RecTuneError(f"unknown benchmark {name!r}; known: {', '.join(names())}")
    if name not in _registry and name in BUILTIN:
        register(importlib.import_module(BUILTIN[name]).BENCHMARK)
    if name not in _registry:
        raise RecTuneError(f"unknown benchmark {name!r}; known: {', '.join(names())}")
    return _registry[name]


def benchmark_of(path: str | os.PathLike) -> Benchmark:
    """The benchmark of a rows file, from its first row (the whole file is checked when it is loaded)."""
    for _, raw in numbered_jsonl(path):
        name = raw.get("benchmark", UNNAMED_ROWS)
        return get_benchmark(name if isinstance(name, str) else None)
    raise DataError(path, "no rows")


def load_rows(path: str | os.PathLike) -> list[Any]:
    """Load and validate canonical rows of one benchmark (a stored line may hold several: see
    ``Benchmark.read_line``); ids must be unique."""
    rows = []
    seen: dict[str, int] = {}
    benchmark = None
    for line, raw in numbered_jsonl(path):
        name = raw.get("benchmark", UNNAMED_ROWS)
        try:
            kind = get_benchmark(name if isinstance(name, str) else repr(name))
        except RecTuneError:
            message = f"field 'benchmark': must be one of {', '.join(names())}, got {name!r}"
            raise DataError(path, message, line=line) from None
        if benchmark is None:
            benchmark = kind.name
        elif kind.name != benchmark:
            raise DataError(path, f"field 'benchmark': {name!r} rows mixed with {benchmark!r} rows", line=line)
        for row in kind.read_line({"benchmark": kind.name, **raw}, path=path, line=line):
            if row.id in seen:
                raise DataError(path, f"field 'id': duplicate id {row.id!r} (first on line {seen[row.id]})", line=line)
            seen[row.id] = line
            rows.append(row)
    return rows
