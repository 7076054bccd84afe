"""PerRecBench (seed 002): rank a group of users by how much each liked a shared item.

Modules: ``rows`` (the stored group and the rows derived from it), ``groups`` (building groups
and prompts from ratings), ``prompts`` (the three formats and their answer parsers), ``scoring``
(Kendall's τ per group) and ``rewards`` (GRPO).
"""

from __future__ import annotations

import functools
import os

from rectune.benchmarks import Benchmark, MetricSpec, Resources, Scored
from rectune.benchmarks.perrec import baselines as baseline_models
from rectune.benchmarks.perrec import prompts, scoring
from rectune.benchmarks.perrec import rewards as reward_functions
from rectune.benchmarks.perrec.rows import NAME, TASKS, PerRecGroup, PerRecRow
from rectune.core.io import RecTuneError
from rectune.data.rows import label_kind_problem


class PerRecBench(Benchmark):
    name = NAME
    answer_tokens = 16  # a rating, a letter or "B > A > C > D"
    row_type = PerRecRow
    tasks = TASKS
    metrics = {
        "tau": MetricSpec("τ", "signed"),
        "tau_parsed": MetricSpec("τ (parsed)", "signed"),
        "failure_rate": MetricSpec("fail", higher_is_better=False),
        # pairs (and listwise groups) whose answers in both orders name the same letter: position, not preference
        "position_following": MetricSpec("by pos.", higher_is_better=False),
    }
    baselines = baseline_models.BASELINES
    baseline_metric = "tau"
    rewards = reward_functions.REWARDS
    default_rewards = reward_functions.DEFAULT_REWARDS
    label_columns = ("task", "labels", "relative", "means", "group_relative", "position")

    def read_line(self, raw: dict, path: str | os.PathLike = "<row>", line: int | None = None) -> list[PerRecRow]:
        """A stored group expands into its rows; a line with a ``task`` is a row written before groups were
        stored once."""
        if "task" in raw:
            return [PerRecRow.from_dict(raw, path=path, line=line)]
        return PerRecGroup.from_dict(raw, path=path, line=line).rows()

    def unit_values(self, record: dict) -> dict[str, float | None]:
        """Per group: τ (0 when unparseable), τ among parsed groups, and failure."""
        return {
            "tau": record["tau"],
            "tau_parsed": None if record["failed"] else record["tau"],
            "failure_rate": float(record["failed"]),
            "position_following": record.get("position_following"),
        }

    def messages(self, row: PerRecRow, variant: dict) -> list[dict]:
        return prompts.build_messages(row)

    def answer(self, row: PerRecRow, variant: dict) -> str:
        return row.answer

    def labels(self, rows: list[PerRecRow]) -> list[dict]:
        """Each row's users plus the whole group's relative ratings (from the group's listwise row)."""
        groups: dict[str, list[dict]] = {}
        for row in rows:
            if row.task == "listwise":
                groups.setdefault(row.group, row.users)  # the stored order (the reversed row comes second)
        labels = []
        for row in rows:
            group_users = groups.get(row.group)
            if group_users is None:  # rows picked out of a split by hand (its pointwise rows alone, say)
                raise RecTuneError(f"group {row.group!r} has no listwise row among these rows: its RFT labels need "
                                   "the whole group, as data_prep writes a split")  # fmt: skip
            names = [u["user"] for u in group_users]
            if row.task == "pointwise" and row.users[0]["user"] not in names:
                raise RecTuneError(f"row {row.id!r}: user {row.users[0]['user']!r} is not among its group's users")
            position = names.index(row.users[0]["user"]) if row.task == "pointwise" else -1
            labels.append(
                {
                    "task": row.task,
                    "labels": [u["label"] for u in row.users],
                    "relative": [u["relative_rating"] for u in row.users],
                    "means": [u["mean_rating"] for u in row.users],
                    "group_relative": [u["relative_rating"] for u in group_users],
                    "position": position,
                }
            )
        return labels

    def label_problem(self, labels: dict) -> str | None:
        kinds = {"labels": "strings", "relative": "numbers", "means": "numbers", "group_relative": "numbers",
                 "position": "integer"}  # fmt: skip
        problem = label_kind_problem(labels, kinds, TASKS)
        if problem:
            return problem
        shown, group = len(labels["labels"]), len(labels["group_relative"])
        wanted = {"pointwise": 1, "pairwise": 2}.get(labels["task"], group)
        if shown != wanted or len(labels["relative"]) != shown or len(labels["means"]) != shown:
            return (f"field 'labels': a {labels['task']} example needs {wanted} users' labels, relative ratings and "
                    f"means (got {shown}, {len(labels['relative'])} and {len(labels['means'])})")  # fmt: skip
        if group < 2:
            return f"field 'group_relative': a group has at least 2 users, got {group}"
        if labels["task"] == "pointwise" and not 0 <= labels["position"] < group:
            return f"field 'position': must name one of the group's {group} users, got {labels['position']}"
        return None

    def score(self, rows: list[PerRecRow], predictions: dict[str, str], resources: Resources) -> Scored:
        scores = scoring.score_groups(rows, predictions)
        report = {"metrics": list(self.metrics), **scoring.aggregate(scores)}
        report["per_query"] = [vars(s).copy() for s in scores]
        return Scored(report, functools.partial(scoring.query_table, rows, predictions, scores))

    def format_table(self, report: dict) -> str:
        return scoring.format_table(report)


BENCHMARK = PerRecBench()
