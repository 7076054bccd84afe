"""Recommenders without an LLM, evaluated like any checkpoint: ``evaluate/run.py --model baseline:NAME``.

A baseline answers each held-out row in its benchmark's answer form (RecBench+: K titles joined by
``[SEP]``; PerRecBench: a rating, a label or a ranking of labels; LLMRec: a rating or ten titles a
line), so the benchmark's own scorer scores it exactly as it scores a model. It fits on the data
folder's ``train.jsonl`` only, choosing its hyper-parameters from a small grid by the benchmark's
main metric on ``valid.jsonl``; a held-out row gives it what a prompt gives a model (the query, the
user's history, the candidates), never its ground truth or conditions (``kg-oracle``, a ceiling,
reads the row's stated conditions by design and is marked as a ceiling wherever it is shown).

Per benchmark (``--help`` of ``evaluate/run.py`` lists them): :mod:`.recbench`, :mod:`.perrec`,
:mod:`.llmrec`.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rectune.benchmarks import Resources, benchmark_of, load_rows
from rectune.core.io import DataError, RecTuneError

log = logging.getLogger(__name__)
PREFIX = "baseline:"


@dataclass
class Context:
    """What a baseline may read besides rows: the data folder's files (catalog, KG) and the answer length K."""

    resources: Resources
    k: int
    seed: int = 0


class Baseline(ABC):
    """One recommender without an LLM. ``answers`` fits on ``train`` and answers ``rows`` with ``params``."""

    name: ClassVar[str]
    benchmark: ClassVar[str]
    library: ClassVar[str]
    reads: ClassVar[str]  # what it fits on and what it reads of a held-out row (docs, --help, reports)
    tasks: ClassVar[tuple[str, ...] | None] = None  # the tasks it answers; None: all
    grid: ClassVar[dict[str, list]] = {}  # hyper-parameters tried on the validation split
    ceiling: ClassVar[bool] = False  # reads what a model is not given: shown as a ceiling, never a competitor

    @abstractmethod
    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        """Row id -> answer text, for every row of ``rows`` whose task it answers."""

    def answers_task(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks


# benchmark -> metric (of the report's ``overall``, else averaged over ``by_task``) the grid maximises
TUNING_METRIC = {"recbench+": ("ndcg", 1), "perrecbench": ("tau", 1), "llmrec": (None, 1)}


def registry() -> dict[str, dict[str, Baseline]]:
    """benchmark name -> baseline name -> baseline."""
    from rectune.models.baselines import llmrec, perrec, recbench

    return {module.BENCHMARK: {b.name: b for b in module.BASELINES} for module in (recbench, perrec, llmrec)}


def names_help() -> str:
    """``recbench+: bm25, popularity, ...`` one benchmark a line (for ``--help``)."""
    lines = []
    for benchmark, baselines in registry().items():
        shown = [f"{name} (ceiling)" if b.ceiling else name for name, b in baselines.items()]
        lines.append(f"  {benchmark}: {', '.join(shown)}")
    return "\n".join(lines)


def get_baseline(spec: str, benchmark: str) -> Baseline:
    """The baseline ``baseline:NAME`` of ``benchmark``; one line naming the known ones otherwise."""
    name = spec.removeprefix(PREFIX)
    known = registry().get(benchmark, {})
    if name not in known:
        raise RecTuneError(f"--model {spec}: no baseline {name!r} for {benchmark}; known: {', '.join(known)}")
    return known[name]


def file_sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _tuning_value(report: dict, benchmark: str) -> float:
    metric, sign = TUNING_METRIC[benchmark]
    if metric is not None:
        return sign * (report["overall"].get(metric) or 0.0)
    # LLMRec: NDCG@10 of the ranking tasks, minus RMSE for rating, over the tasks answered
    values = []
    for task, summary in report["by_task"].items():
        if task == "rating" and summary.get("rmse") is not None:
            values.append(-summary["rmse"])
        elif summary.get("ndcg@10") is not None:
            values.append(summary["ndcg@10"])
    return sum(values) / len(values) if values else 0.0


@dataclass
class Fitted:
    """A baseline chosen on validation: its answers come from ``answer``; ``record`` says how it was fitted."""

    baseline: Baseline
    train: list
    params: dict
    context: Context
    record: dict

    def answer(self, rows: list) -> dict[str, str]:
        return self.baseline.answers(self.train, rows, self.params, self.context)


def fit_baseline(spec: str, data: str | os.PathLike, k: int, seed: int = 0, **resource_args: Any) -> Fitted:
    """Choose the baseline's hyper-parameters on ``valid.jsonl`` beside ``data`` (fitting on ``train.jsonl``)."""
    folder = Path(data).parent
    train_path, valid_path = folder / "train.jsonl", folder / "valid.jsonl"
    if not train_path.is_file():
        raise DataError(train_path, "a baseline fits on the training split beside --data: not found")
    benchmark = benchmark_of(data)
    baseline = get_baseline(spec, benchmark.name)
    train = load_rows(train_path)
    context = Context(Resources(data, **resource_args), k, seed)
    combos = [dict(zip(baseline.grid, values, strict=True)) for values in itertools.product(*baseline.grid.values())]
    tried = []
    params = combos[0] if combos else {}
    if len(combos) > 1:
        if not valid_path.is_file():
            raise DataError(valid_path, f"baseline:{baseline.name} chooses its hyper-parameters here: not found")
        valid = [r for r in load_rows(valid_path) if baseline.answers_task(r.task)]
        if not valid:
            raise DataError(valid_path, f"no rows baseline:{baseline.name} answers: nothing to choose its "
                            "hyper-parameters on")  # fmt: skip
        valid_context = Context(Resources(valid_path, **resource_args), k, seed)
        for combo in combos:
            answers = baseline.answers(train, valid, combo, valid_context)
            scored = benchmark.score(valid, answers, valid_context.resources)
            tried.append({"params": combo, "valid": round(_tuning_value(scored.report, benchmark.name), 6)})
        params = max(tried, key=lambda t: t["valid"])["params"]  # the first best on a tie: the grid's order
        log.info("baseline:%s: chose %s on %s (%d tried)", baseline.name, params, valid_path, len(tried))
    record = {
        "name": baseline.name,
        "library": baseline.library,
        "reads": baseline.reads,
        "ceiling": baseline.ceiling,
        "tasks": list(baseline.tasks) if baseline.tasks else None,
        "k": k,
        "seed": seed,
        "train": {"path": str(train_path), "sha256": file_sha256(train_path), "rows": len(train)},
        "valid": {"path": str(valid_path), "sha256": file_sha256(valid_path)} if tried else None,
        "params": params,
        "tuning": tried,
    }
    return Fitted(baseline, train, params, context, record)
