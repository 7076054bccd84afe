"""PerRecBench baselines: rank a group's users by their predicted relative rating of the shared item.

Each predicts user u's rating r̂ of the group's item; the relative rating is r̂ minus u's mean rating
(which the prompt states), and the answers follow from it in every format: pointwise the rating r̂,
pairwise the label of the user with the higher relative rating, listwise the labels by relative
rating. Ties are broken in a seeded random order, never by label, so no baseline follows position.

What they fit on (items keyed by title, as histories name them): every training group's users with
their rating of its item, and every user's history in the training and the held-out groups (what a
prompt shows); a held-out user's rating of a held-out item is never fitted.

* ``random``: a seeded random order per group and format (expected τ 0);
* ``user-mean``: r̂ = the user's mean, so every relative rating is 0: the order is the tie-break's,
  chance by construction, and pointwise answers carry no order at all (τ 0);
* ``bias``: global mean + user bias + item bias (cornac ``BaselineOnly``), regularisation tuned;
* ``mf``: biased matrix factorisation (cornac ``MF``), factors and regularisation tuned.
"""

from __future__ import annotations

import random
from abc import abstractmethod

from rectune.benchmarks.baselines import Baseline, Context
from rectune.benchmarks.perrec.rows import TASKS, PerRecRow
from rectune.data.collaborative import Interactions, fit_rating_model


def training_ratings(train: list[PerRecRow], rows: list[PerRecRow]) -> Interactions:
    ratings = Interactions()
    for row in train:
        for user in row.users:
            ratings.add(user["user"], row.item["title"], user["rating"])
    for row in [*train, *rows]:
        for user in row.users:
            for seen in user["history"]:
                ratings.add(user["user"], seen["title"], seen["rating"])
    for row in rows:
        for user in row.users:
            ratings.drop(user["user"], [row.item["title"]])
    return ratings


def clamp(rating: float, scale: list[float] | None) -> float:
    low, high, _ = scale or (1.0, 5.0, 1.0)
    return min(max(rating, max(low, 1.0)), high)  # answers are read from 1 up (0.5 alone aside)


def group_answers(rows: list[PerRecRow], predicted: dict[tuple[str, str], float], seed: int) -> dict[str, str]:
    """Answers from predicted ratings ``(group, user) -> r̂``; ties in a seeded order per group."""
    answers = {}
    for row in rows:
        tie_break = random.Random(f"{seed}/{row.group}")
        order = {u["user"]: tie_break.random() for u in sorted(row.users, key=lambda u: u["user"])}
        relative = {u["user"]: predicted[(row.group, u["user"])] - u["mean_rating"] for u in row.users}
        by_preference = sorted(row.users, key=lambda u: (-round(relative[u["user"]], 9), order[u["user"]]))
        if row.task == "pointwise":
            value = clamp(predicted[(row.group, row.users[0]["user"])], row.scale)
            answers[row.id] = f"{value:.6f}".rstrip("0").rstrip(".")  # the scorer subtracts the stated mean exactly
        elif row.task == "pairwise":
            answers[row.id] = by_preference[0]["label"]
        else:
            answers[row.id] = " > ".join(u["label"] for u in by_preference)
    return answers


class RatingBaseline(Baseline):
    @abstractmethod
    def predict(self, train: list, rows: list, params: dict, seed: int) -> dict[tuple[str, str], float]:
        """``(group, user) -> r̂`` for every user of ``rows``."""

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        return group_answers(rows, self.predict(train, rows, params, context.seed), context.seed)


class Random(Baseline):
    name, library = "random", "python random"
    reads = "nothing: a seeded random order per group and format (expected τ 0)"

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        answers = {}
        for task in TASKS:  # an order of its own per format, so the formats' τ are independent draws
            task_rows = [row for row in rows if row.task == task]
            predicted = {
                (row.group, u["user"]): u["mean_rating"] + random.Random(f"{context.seed}/{task}/{row.group}/"
                                                                         f"{u['user']}").random()
                for row in task_rows
                for u in row.users
            }  # fmt: skip
            answers.update(group_answers(task_rows, predicted, context.seed))
        return answers


class UserMean(RatingBaseline):
    name, library = "user-mean", "rectune"
    reads = "each user's mean rating, as the prompt states it"

    def predict(self, train: list, rows: list, params: dict, seed: int) -> dict[tuple[str, str], float]:
        return {(row.group, u["user"]): u["mean_rating"] for row in rows for u in row.users}


class LibraryRater(RatingBaseline):
    def predict(self, train: list, rows: list, params: dict, seed: int) -> dict[tuple[str, str], float]:
        model = fit_rating_model(self.name, training_ratings(train, rows), params, seed)
        predicted = {}
        for row in rows:
            for user in row.users:
                scores = model.scores(user["user"]) or {}
                predicted[(row.group, user["user"])] = scores.get(row.item["title"], user["mean_rating"])
        return predicted


class Bias(LibraryRater):
    name, library = "bias", "cornac BaselineOnly"
    reads = "training groups' ratings and every prompt's histories"
    grid = {"lambda_reg": [0.02, 0.2]}


class MF(LibraryRater):
    name, library = "mf", "cornac MF"
    reads = "training groups' ratings and every prompt's histories"
    grid = {"factors": [8, 32], "lambda_reg": [0.02, 0.2]}


BASELINES = (Random(), UserMean(), Bias(), MF())
