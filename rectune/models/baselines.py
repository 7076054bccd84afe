"""Recommenders without an LLM, evaluated like any checkpoint: ``evaluate/run.py --model baseline:NAME``.

A baseline answers each held-out row in its benchmark's answer form (RecBench+: K titles joined by
``[SEP]``; PerRecBench: a rating, a label or a ranking of labels; LLMRec: a rating or ten titles a
line), so the benchmark's own scorer scores it exactly as it scores a model. It fits on the data
folder's ``train.jsonl`` only, choosing its hyper-parameters from a small grid by the benchmark's
main metric on ``valid.jsonl`` (``Benchmark.tuning_value``); a held-out row gives it what a prompt
gives a model (the query, the user's history, the candidates), never its ground truth or conditions
(``kg-oracle``, a ceiling, reads the row's stated conditions by design and is marked as a ceiling
wherever it is shown).

Each benchmark lists its own (``Benchmark.baselines``, in its package's ``baselines.py``);
``--help`` of ``evaluate/run.py`` lists them.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rectune.benchmarks import Resources, benchmark_of, get_benchmark, load_rows, names
from rectune.benchmarks.baselines import Baseline, Context
from rectune.core.io import DataError, RecTuneError

log = logging.getLogger(__name__)
PREFIX = "baseline:"


def registry() -> dict[str, dict[str, Baseline]]:
    """benchmark name -> baseline name -> baseline (``Benchmark.baselines``)."""
    return {name: {b.name: b for b in get_benchmark(name).baselines} for name in names()}


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
    other = sorted({row.benchmark for row in train} - {benchmark.name})
    if other:
        raise DataError(train_path, f"holds {', '.join(other)} rows, but --data is {benchmark.name}: a baseline fits "
                        "on the training split of the same benchmark")  # fmt: skip
    context = Context(Resources(data, **resource_args), k, seed)
    combos = [dict(zip(baseline.grid, values, strict=True)) for values in itertools.product(*baseline.grid.values())]
    tried = []
    params = combos[0] if combos else {}
    if len(combos) > 1:
        if not valid_path.is_file():
            raise DataError(valid_path, f"baseline:{baseline.name} chooses its hyper-parameters here: not found")
        # data_prep's --valid-size of a small set can round to no row: the file is written, empty
        valid = [r for r in load_rows(valid_path) if baseline.answers_task(r.task)] if valid_path.stat().st_size else []
        if not valid:
            raise DataError(valid_path, f"no rows baseline:{baseline.name} answers: nothing to choose its "
                            "hyper-parameters on (data_prep's --valid-size holds rows out here)")  # fmt: skip
        valid_context = Context(Resources(valid_path, **resource_args), k, seed)
        for combo in combos:
            answers = baseline.answers(train, valid, combo, valid_context)
            scored = benchmark.score(valid, answers, valid_context.resources)
            tried.append({"params": combo, "valid": round(benchmark.tuning_value(scored.report), 6)})
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
