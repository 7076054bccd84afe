"""The baseline interface: a recommender without an LLM that answers a benchmark's rows in its answer form.

Each benchmark package lists its baselines in ``<package>/baselines.py`` (``Benchmark.baselines``);
:mod:`rectune.models.baselines` fits one on a data folder's training split, chooses its
hyper-parameters on the validation split and hands its answers to evaluation like a model's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from rectune.benchmarks import Resources


@dataclass
class Context:
    """What a baseline may read besides rows: the data folder's files (catalog, KG) and the answer length K."""

    resources: Resources
    k: int
    seed: int = 0


class Baseline(ABC):
    """One recommender without an LLM. ``answers`` fits on ``train`` and answers ``rows`` with ``params``."""

    name: ClassVar[str]
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
