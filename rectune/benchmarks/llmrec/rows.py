"""The LLMRec canonical row: one user, one task.

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
                    sequential with ``--sequential-candidates``), the held-out item among them
``target``          the reference answer: the rating, the item's title, the review
                    text or the review title
``review``          optional: the held-out review's text (explanation, summarisation)
``scale``           optional: the rating scale ``[lowest, highest, step]`` (absent: 1-5)
``feedback``        optional: ``ratings`` when the source has ratings only (MovieLens):
                    prompts then speak of rated movies, not reviews
==================  ===============================================================
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

from rectune.data.rows import RowChecker

NAME = "llmrec"
TASKS = ("rating", "sequential", "direct", "explanation", "summarization")
RANKING_TASKS = ("sequential", "direct")
TEXT_TASKS = ("explanation", "summarization")
FEEDBACK = ("reviews", "ratings")


@dataclass
class LLMRecRow:
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
    scale: list[float] | None = None
    feedback: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> LLMRecRow:
        check = RowChecker(raw, cls, path, line)
        row = cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", (NAME,)),
            domain=check.string("domain"),
            task=check.string("task", TASKS),
            user=check.string("user"),
            history=check.objects("history", ("id", "title")),
            item=check.object("item", ("id", "title")),
            target=check.string("target"),
            candidates=check.objects("candidates", ("id", "title"), optional=True),
            review=check.string("review", optional=True),
            scale=check.scale(),
            feedback=check.string("feedback", FEEDBACK, optional=True),
        )
        check.numbers_in("history", row.history, ("rating",))
        if row.task == "rating":
            try:
                rating = float(row.target)
            except ValueError:
                rating = math.nan
            if not math.isfinite(rating):
                needs = "a rating task needs a numeric target (a finite number)"
                raise check.fail("target", f"{needs}, got {row.target!r}")
        return row
