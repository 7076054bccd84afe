"""PerRecBench's stored record (one group, once) and the rows derived from it (one prompt per format).

``test.jsonl`` (and ``train.jsonl``, ``valid.jsonl``) hold one :class:`PerRecGroup` per line:
``id`` (the group), ``benchmark``, ``domain``, ``difficulty``, ``item``, ``users`` (labelled A, B, ...
in prompt order) and the optional ``scale``, as below. Loading expands each group into its rows:
one pointwise row per user, two pairwise rows per pair (both orders), two listwise rows (the stored
order and its reverse), with their answers (the rating; the user of the pair with the higher relative
rating; the users by relative rating).
Files written before groups were stored once hold the rows themselves, one per line; they load as
they are.

The row, one prompt of one group in one format:

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
from dataclasses import dataclass, fields
from itertools import combinations

from rectune.data.ratings import rating_text
from rectune.data.rows import RowChecker

NAME = "perrecbench"
TASKS = ("pointwise", "pairwise", "listwise")
DIFFICULTIES = ("easy", "medium", "hard")
LABELS = "ABCDEFGH"
USER_KEYS = ("label", "user", "mean_rating", "history", "rating", "relative_rating")


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
        return _fields(self)

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> PerRecRow:
        check = RowChecker(raw, cls, path, line)
        users = check.objects("users", USER_KEYS)
        if not users:
            raise check.fail("users", "must not be empty")
        _check_ratings(check, users)
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
            item=_checked_item(check),
            users=users,
            answer=check.string("answer"),
            scale=check.scale(),
        )


def _check_ratings(check: RowChecker, users: list[dict]) -> None:
    """Every rating a group's users carry is a finite number (NaN or "five" would move every tau silently)."""
    check.numbers_in("users", users, ("mean_rating", "rating", "relative_rating"), where="user")
    check.strings_in("users", users, ("label", "user"), where="user")
    check.strings_in("users", users, ("profile",), where="user", empty=True)
    for index, user in enumerate(users):
        if not isinstance(user["history"], list) or not all(isinstance(h, dict) for h in user["history"]):
            raise check.fail("users", f"user {index}: 'history' must be a list of objects")
        for place, entry in enumerate(user["history"]):  # the prompt shows each one's title and rating
            if missing := next((key for key in ("title", "rating") if key not in entry), None):
                raise check.fail("users", f"user {index}: history entry {place}: {missing!r} missing")
        check.numbers_in("users", user["history"], ("rating",), where=f"user {index}: history entry")
        check.strings_in("users", user["history"], ("title",), where=f"user {index}: history entry")


def _checked_item(check: RowChecker) -> dict:
    """The item the group rates: an id and title, with optional categories (strings) and description (text)
    as the prompt shows them."""
    item = check.object("item", ("id", "title"))
    check.strings_in("item", [item], ("description",), where=None, empty=True)
    categories = item.get("categories", [])
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise check.fail("item", f"'categories' must be a list of strings, got {categories!r}")
    return item


@dataclass
class PerRecGroup:
    """One group as stored: everything its rows in every format are made of."""

    id: str
    benchmark: str
    domain: str
    difficulty: str
    item: dict
    users: list[dict]
    scale: list[float] | None = None

    def to_dict(self) -> dict:
        return _fields(self)

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> PerRecGroup:
        check = RowChecker(raw, cls, path, line)
        users = check.objects("users", USER_KEYS)
        _check_ratings(check, users)
        labels = [u["label"] for u in users]
        if not 2 <= len(users) <= len(LABELS) or labels != list(LABELS[: len(users)]):
            raise check.fail("users", f"must be 2 to {len(LABELS)} users labelled A, B, ... in order, got {labels}")
        return cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", (NAME,)),
            domain=check.string("domain"),
            difficulty=check.string("difficulty", DIFFICULTIES),
            item=_checked_item(check),
            users=users,
            scale=check.scale(),
        )

    def rows(self) -> list[PerRecRow]:
        """The group's pointwise rows (one per user), pairwise rows (one per pair in each order: ``AB`` and ``BA``)
        and listwise rows (the stored order, and reversed: ``/reversed``), so every user is asked about in
        every position and an answer that follows position cancels out (see ``scoring``)."""

        def row(task: str, suffix: str, users: list[dict], answer: str) -> PerRecRow:
            row_id = f"{self.id}/{task}" + (f"/{suffix}" if suffix else "")
            return PerRecRow(row_id, NAME, self.domain, task, self.id, len(self.users), self.difficulty, self.item,
                             users, answer, self.scale)  # fmt: skip

        rows = [row("pointwise", str(i), _relabel([u]), rating_text(u["rating"])) for i, u in enumerate(self.users)]
        for a, b in combinations(self.users, 2):
            for first, second in ((a, b), (b, a)):
                pair = _relabel([first, second])
                winner = max(pair, key=lambda u: u["relative_rating"])["label"]
                rows.append(row("pairwise", f"{first['label']}{second['label']}", pair, winner))
        for suffix, users in (("", self.users), ("reversed", _relabel(self.users[::-1]))):
            ranking = sorted(users, key=lambda u: -u["relative_rating"])
            rows.append(row("listwise", suffix, users, " > ".join(u["label"] for u in ranking)))
        return rows


def _relabel(users: list[dict]) -> list[dict]:
    return [{**u, "label": label} for label, u in zip(LABELS, users, strict=False)]


def _fields(record: PerRecRow | PerRecGroup) -> dict:
    # not dataclasses.asdict: it deep-copies every user block, which dominated writing a large build
    return {f.name: getattr(record, f.name) for f in fields(record) if getattr(record, f.name) is not None}
