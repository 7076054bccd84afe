"""The PerRecBench canonical row: one prompt of one group in one format.

==================  ===============================================================
``id``              ``"<group>/<task>[/<user labels>]"``
``benchmark``       ``"perrecbench"``
``domain``          the source's category, e.g. ``"beauty"`` or ``"movies"``
``task``            ``pointwise``, ``pairwise`` or ``listwise``
``group``           the group id; the rows of one group and task are scored together
``group_size``      users in the group (2-4)
``difficulty``      ``easy``, ``medium`` or ``hard`` (see ``groups.py``)
``item``            the shared item ``{"id", "title", "categories", "description"}``
``users``           the users in the prompt, in prompt order: ``{"label", "user",
                    "mean_rating", "history": [{"title", "rating"}], "profile",
                    "rating", "relative_rating"}``; the last two are the truth
``answer``          the reference answer (SFT target)
``scale``           optional: the source's rating scale ``[lowest, highest, step]``
                    (``[0.5, 5, 0.5]`` for MovieLens half stars; absent: 1-5 whole stars)
==================  ===============================================================
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from rectune.schema import RowChecker

NAME = "perrecbench"
TASKS = ("pointwise", "pairwise", "listwise")
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass
class PerRecRow:
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
    scale: list[float] | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> PerRecRow:
        check = RowChecker(raw, cls, path, line)
        users = check.objects("users", ("label", "user", "mean_rating", "history", "rating", "relative_rating"))
        if not users:
            raise check.fail("users", "must not be empty")
        size = check.number("group_size")
        if not isinstance(size, int) or size < 2:
            raise check.fail("group_size", f"must be an integer >= 2, got {size!r}")
        return cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", (NAME,)),
            domain=check.string("domain"),
            task=check.string("task", TASKS),
            group=check.string("group"),
            group_size=size,
            difficulty=check.string("difficulty", DIFFICULTIES),
            item=check.object("item", ("id", "title")),
            users=users,
            answer=check.string("answer"),
            scale=check.scale(),
        )
