"""LLMRec baselines: rating prediction, and sequential and direct recommendation.

What they fit on: every training row's user with their history and held-out item (ratings where the
source has them), and every evaluated row's history (what its prompt shows); an evaluated row's
held-out item is never fitted for its user. A ranking answer is ten titles, one a line, best first,
from the row's candidates when it has some (direct), else from every item the user has not seen.

* rating (answers ``rating`` rows): ``global-mean`` (cornac ``GlobalAvg``), ``bias`` (``BaselineOnly``),
  ``mf`` (``MF``), the last two tuned;
* ranking (answers ``sequential`` and ``direct`` rows): ``popularity`` (cornac ``MostPop``), ``itemknn``
  (``ItemKNN``, k tuned), ``bpr`` (``BPR``, factors and regularisation tuned);
* ``sasrec`` (answers ``sequential`` rows): cornac's ``SASRec`` on every training user's history then
  held-out item, and every evaluated row's history, as sequences; embedding size tuned.
"""

from __future__ import annotations

from abc import abstractmethod

from rectune.benchmarks.baselines import Baseline, Context
from rectune.benchmarks.llmrec.rows import RANKING_TASKS, LLMRecRow
from rectune.data.collaborative import (
    Interactions,
    Model,
    fit_bpr,
    fit_itemknn,
    fit_rating_model,
    fit_sasrec,
    popularity,
    ranked,
)

RANKED = 10  # the prompt asks for up to 10 titles


def interactions_of(train: list[LLMRecRow], rows: list[LLMRecRow], with_ratings: bool) -> Interactions:
    def rating(entry: dict) -> float:
        return float(entry.get("rating", 1.0)) if with_ratings else 1.0

    interactions = Interactions()
    for row in train:
        for entry in row.history:
            interactions.add(row.user, entry["id"], rating(entry))
        target = float(row.target) if with_ratings and row.task == "rating" else 1.0
        interactions.add(row.user, row.item["id"], target)
    for row in rows:
        interactions.drop(row.user, [row.item["id"]])
    for row in rows:
        for entry in row.history:
            interactions.add(row.user, entry["id"], rating(entry))
    return interactions


class Rater(Baseline):
    tasks = ("rating",)
    reads = "training users' ratings and every prompt's history"

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        model = fit_rating_model(self.name, interactions_of(train, rows, with_ratings=True), params, context.seed)
        answers = {}
        for row in rows:
            scores = model.scores(row.user) or {}
            history = [float(h["rating"]) for h in row.history if "rating" in h]
            fallback = sum(history) / len(history) if history else 3.0
            low, high, _ = row.scale or (1.0, 5.0, 1.0)
            value = min(max(scores.get(row.item["id"], fallback), max(low, 1.0)), high)
            answers[row.id] = f"{value:.3f}"
        return answers


class GlobalMean(Rater):
    name, library = "global-mean", "cornac GlobalAvg"


class Bias(Rater):
    name, library = "bias", "cornac BaselineOnly"
    grid = {"lambda_reg": [0.02, 0.2]}


class MF(Rater):
    name, library = "mf", "cornac MF"
    grid = {"factors": [8, 32], "lambda_reg": [0.02, 0.2]}


class Ranker(Baseline):
    tasks = RANKING_TASKS
    reads = "training users' items and every prompt's history (and candidates)"

    @abstractmethod
    def fit(self, interactions: Interactions, params: dict, seed: int) -> Model | None:
        """The library's model, or None to rank by popularity alone."""

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        interactions = interactions_of(train, rows, with_ratings=False)
        model = self.fit(interactions, params, context.seed)
        popular = popularity(interactions, context.seed)
        items = context.resources.matcher().items
        answers = {}
        for row in rows:
            scores = (model.scores(row.user) if model else None) or popular
            pool = [c["id"] for c in row.candidates] if row.candidates else list(items)
            seen = set() if row.candidates else {entry["id"] for entry in row.history}
            answers[row.id] = "\n".join(items[i].title for i in ranked(scores, pool, seen, RANKED) if i in items)
        return answers


class Popularity(Ranker):
    name, library = "popularity", "cornac MostPop"

    def fit(self, interactions: Interactions, params: dict, seed: int) -> Model | None:
        return None


class ItemKNN(Ranker):
    name, library = "itemknn", "cornac ItemKNN"
    grid = {"k": [10, 50]}

    def fit(self, interactions: Interactions, params: dict, seed: int) -> Model | None:
        return fit_itemknn(interactions, params["k"], seed)


class BPR(Ranker):
    name, library = "bpr", "cornac BPR"
    grid = {"factors": [16, 64], "lambda_reg": [0.001, 0.01]}

    def fit(self, interactions: Interactions, params: dict, seed: int) -> Model | None:
        return fit_bpr(interactions, params["factors"], params["lambda_reg"], seed)


class SASRec(Baseline):
    name, library, tasks = "sasrec", "cornac SASRec", ("sequential",)
    reads = "training users' item sequences and every prompt's history"
    grid = {"embedding_dim": [32, 64]}

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        held_out = {(row.user, row.item["id"]) for row in rows}
        sequences = [
            [item for item in [*(e["id"] for e in row.history), row.item["id"]] if (row.user, item) not in held_out]
            for row in train
            if row.task == "sequential"
        ]
        sequences += [[e["id"] for e in row.history] for row in rows]
        model = fit_sasrec([s for s in sequences if s], params["embedding_dim"], context.seed)
        items = context.resources.matcher().items
        answers = {}
        for row in rows:
            history = [e["id"] for e in row.history]
            chosen = ranked(model.scores(history), list(items), set(history), RANKED)
            answers[row.id] = "\n".join(items[i].title for i in chosen)
        return answers


BASELINES = (GlobalMean(), Bias(), MF(), Popularity(), ItemKNN(), BPR(), SASRec())
