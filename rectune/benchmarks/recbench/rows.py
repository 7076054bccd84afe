"""The RecBench+ canonical row.

Fields (all required unless marked optional):

========================  =================================================================
``id``                    unique string, e.g. ``"movie/explicit/17"``
``benchmark``             ``"recbench+"`` (rows written without it are RecBench+ rows)
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
``candidates``            optional list of ``{"id", "title"[, "rank", "facts"]}``: the items a
                          retriever found for the query text (grounded prompts, ``--candidates
                          N``), ``rank`` their place in its order (1 = best)
========================  =================================================================
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from rectune.data.rows import RowChecker

NAME = "recbench+"
DOMAINS = ("movie", "book")
CONDITION_TASKS = ("explicit", "implicit", "misinformed")
PROFILE_TASKS = ("interest", "demographics")
TASKS = CONDITION_TASKS + PROFILE_TASKS


@dataclass
class RecBenchRow:
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
    candidates: list[dict] | None = None

    @property
    def is_condition_based(self) -> bool:
        return self.task in CONDITION_TASKS

    def candidate_ranks(self) -> list[int] | None:
        """Each candidate's retriever rank in the order the row lists them, or None unless every one has a rank
        (a closed-book row, or a release that stores no ranks)."""
        if not self.candidates or any(candidate.get("rank") is None for candidate in self.candidates):
            return None
        return [candidate["rank"] for candidate in self.candidates]

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict, *, path: str | os.PathLike = "<row>", line: int | None = None) -> RecBenchRow:
        """Validate ``raw`` and build a row; errors name ``path``, ``line`` and the field."""
        check = RowChecker({"benchmark": NAME, **raw}, cls, path, line)
        ground_truth = check.strings("ground_truth", optional=False, one_line=True)
        if not ground_truth:
            raise check.fail("ground_truth", "must not be empty")
        conditions = check.pairs("conditions")
        candidates = check.objects("candidates", ("id", "title"), optional=True)
        if candidates:
            check.numbers_in("candidates", candidates, ("rank",), "candidate")
            check.strings_in("candidates", candidates, ("facts",), "candidate", empty=True)
        return cls(
            id=check.string("id"),
            benchmark=check.string("benchmark", (NAME,)),
            domain=check.string("domain", DOMAINS),
            task=check.string("task", TASKS),
            query=check.string("query"),
            ground_truth=ground_truth,
            ground_truth_ids=check.strings("ground_truth_ids", one_line=True),
            conditions=conditions,
            condition_num=check.count("condition_num", len(conditions)),
            history=check.strings("history", one_line=True),
            misinformation=check.objects("misinformation", optional=True),
            multihop=check.objects("multihop", optional=True),
            source_user=check.string("source_user", optional=True),
            profile=check.object("profile", optional=True),
            candidates=candidates,
        )
