"""RecBench+ baselines: each answers a query with K titles joined by ``[SEP]``.

What they fit on: the users of ``train.jsonl`` (a query's ``source_user``, else the query itself),
each with the items of their history and the query's ground truth, less any item that is the ground
truth of a held-out query from the same user. What they read of a held-out query: its text (bm25),
its user's history (itemknn, als; a query without a history they know gets the popularity answer,
and the log says how many did), its candidates when the prompt lists some (every baseline then ranks only those, as the
model chooses among them). Items the user already consumed are never recommended.

* ``bm25``: the retriever's ranking from the query text, top K (on grounded rows, the stored
  candidates' ``rank``; else BM25 over the catalog's titles and attributes, without the KG, which
  holds the held-out queries' conditions);
* ``popularity``: the items most users consumed (cornac ``MostPop``);
* ``itemknn``: item-based kNN, cosine (cornac ``ItemKNN``), k tuned;
* ``als``: implicit-feedback matrix factorisation (implicit ``AlternatingLeastSquares``), tuned;
* ``kg-oracle`` (a ceiling): items the KG says meet every condition the query states (its conditions
  read from the row), most popular first; condition-based tasks only.
"""

from __future__ import annotations

import logging
from abc import abstractmethod

from rectune.benchmarks.baselines import Baseline, Context
from rectune.benchmarks.recbench import rerec
from rectune.benchmarks.recbench.rows import CONDITION_TASKS, RecBenchRow
from rectune.core.io import DataError
from rectune.data.catalog import KnowledgeGraph
from rectune.data.collaborative import (
    Interactions,
    Model,
    fit_als,
    fit_itemknn,
    popularity,
    ranked,
)
from rectune.data.mentions import SEP
from rectune.data.retrieval import CandidateRetriever
from rectune.data.titles import display_title

log = logging.getLogger(__name__)


def user_of(row: RecBenchRow) -> str:
    return row.source_user or f"query:{row.id}"


def history_ids(row: RecBenchRow, context: Context) -> list[str]:
    matcher = context.resources.matcher()
    return [i for i in (matcher.resolve(title) for title in row.history) if i is not None]


def training_interactions(train: list[RecBenchRow], rows: list[RecBenchRow], context: Context) -> Interactions:
    """Training users' histories and ground truths, plus each held-out query's history as a user of its own;
    a held-out query's ground truth is dropped from its source user."""
    interactions = Interactions()
    for row in train:
        for item in [*history_ids(row, context), *row.ground_truth_ids]:
            interactions.add(user_of(row), item)
    for row in rows:
        if row.source_user:
            interactions.drop(row.source_user, row.ground_truth_ids)
    for row in rows:
        for item in history_ids(row, context):
            interactions.add(f"query:{row.id}", item)
    return interactions


def pool(row: RecBenchRow, context: Context) -> list[str]:
    """The items a baseline may recommend: the row's candidates when it has some, else the whole catalog.

    Candidates come in the retriever's order where they keep its ranks: items a model scores alike, or not at all,
    keep the pool's order, and the order a prompt lists them in (``--candidate-order``) must not decide an answer.
    """
    if row.candidates:
        ids = [candidate["id"] for candidate in checked_candidates(row, context)]
        ranks = row.candidate_ranks()
        return ids if ranks is None else [item for _, item in sorted(zip(ranks, ids, strict=True))]
    return list(context.resources.matcher().items)


def checked_candidates(row: RecBenchRow, context: Context) -> list[dict]:
    """The row's candidates, each in the catalog (a baseline answers with catalog titles: an unknown id has none)."""
    items = context.resources.matcher().items
    missing = next((c["id"] for c in row.candidates or [] if c["id"] not in items), None)
    if missing is not None:
        raise DataError(context.resources.data, f"row {row.id!r}: candidate {missing!r} is not in the catalog")
    return row.candidates or []


def answer_text(item_ids: list[str], context: Context) -> str:
    """The titles joined by ``[SEP]``; under the ReRec protocol, the first one boxed (the answer form it scores)."""
    items = context.resources.matcher().items
    titles = [display_title(items[item_id].title) for item_id in item_ids]
    if context.resources.variant.get("protocol") == rerec.PROTOCOL:
        return f"\\boxed{{{titles[0]}}}" if titles else ""
    return f" {SEP} ".join(titles)


class BM25(Baseline):
    name, library = "bm25", "bm25s"
    reads = "the query text (grounded rows: the retriever's stored candidate ranks)"

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        closed_book = [row for row in rows if not row.candidates]
        retrieved: dict[str, list[str]] = {}
        if closed_book:
            retriever = CandidateRetriever(list(context.resources.matcher().items.values()), KnowledgeGraph())
            found = retriever.retrieve([row.query for row in closed_book], context.k)
            retrieved = {row.id: ids for row, ids in zip(closed_book, found, strict=True)}
        answers = {}
        for row in rows:
            if row.candidates:
                if any("rank" not in candidate for candidate in checked_candidates(row, context)):
                    raise DataError(
                        row.id, "candidates carry no retriever rank: rebuild the data with data_prep/recbench.py"
                    )
                retrieved[row.id] = pool(row, context)[: context.k]  # every candidate ranked: the retriever's order
            answers[row.id] = answer_text(retrieved[row.id], context)
        return answers


class Popularity(Baseline):
    name, library = "popularity", "cornac MostPop"
    reads = "training users' items; a held-out row's candidates (ties in the retriever's order) and history (left out)"

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        scores = popularity(training_interactions(train, rows, context), context.seed)
        return {
            row.id: answer_text(ranked(scores, pool(row, context), set(history_ids(row, context)), context.k), context)
            for row in rows
        }


class Collaborative(Baseline):
    """A personalised model on the user's history; rows without history get the popularity answer."""

    @abstractmethod
    def fit(self, interactions: Interactions, params: dict, seed: int) -> Model:
        """The library's model fitted on ``interactions``."""

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        interactions = training_interactions(train, rows, context)
        model = self.fit(interactions, params, context.seed)
        popular = popularity(interactions, context.seed)
        answers, fallbacks = {}, 0
        for row in rows:
            scores = model.scores(f"query:{row.id}")
            fallbacks += scores is None
            chosen = ranked(scores or popular, pool(row, context), set(history_ids(row, context)), context.k)
            answers[row.id] = answer_text(chosen, context)
        if fallbacks:
            log.info("baseline:%s: %d of %d queries have no known history: popularity answers", self.name,
                     fallbacks, len(rows))  # fmt: skip
        return answers


class ItemKNN(Collaborative):
    name, library = "itemknn", "cornac ItemKNN"
    reads = "training users' items; a held-out row's history and candidates (ties in the retriever's order)"
    grid = {"k": [10, 50]}

    def fit(self, interactions: Interactions, params: dict, seed: int):
        return fit_itemknn(interactions, params["k"], seed)


class ALS(Collaborative):
    name, library = "als", "implicit AlternatingLeastSquares"
    reads = "training users' items; a held-out row's history and candidates (ties in the retriever's order)"
    grid = {"factors": [16, 64], "regularization": [0.01, 0.1]}

    def fit(self, interactions: Interactions, params: dict, seed: int):
        return fit_als(interactions, params["factors"], params["regularization"], seed)


class KGOracle(Baseline):
    name, library = "kg-oracle", "rectune KnowledgeGraph"
    reads = "the row's stated conditions and kg.jsonl (which holds them): a ceiling, not a competitor"
    tasks = CONDITION_TASKS
    ceiling = True

    def answers(self, train: list, rows: list, params: dict, context: Context) -> dict[str, str]:
        kg = context.resources.kg()
        popular = popularity(training_interactions(train, rows, context), context.seed)
        catalog = list(context.resources.matcher().items)
        answers = {}
        for row in rows:
            meeting = kg.items_meeting(row.conditions)
            answers[row.id] = answer_text(
                ranked(popular, [i for i in catalog if i in meeting], set(), context.k), context
            )
        return answers


BASELINES = (BM25(), Popularity(), ItemKNN(), ALS(), KGOracle())
