"""Grounded RecBench+ prompts: each query shown with N candidate items a retriever found for it.

``data_prep/recbench.py --candidates N`` stores, per row, the ``candidates`` the retriever
(:class:`~rectune.data.retrieval.CandidateRetriever`) returns for the query text alone, listed by title
(``--candidate-order title``, the default: the list's order says nothing of the retriever's) or in the
retriever's order (``--candidate-order retriever``, a reranking prompt), each with its ``rank`` in the
retriever's order (1 = best), so the retriever's own top K
(``baseline:bm25``) can be read back from the rows without the retriever's KG. The retriever reads
the catalog and the ``--kg`` file, never the KG a release's queries imply (their conditions attached
to their ground-truth items: that would hand it the answers). Data prep records in ``stats.json``
how much of the task the retriever already solved: its recall@N per task (the share of a query's
resolved ground-truth items among its candidates, averaged over queries with any resolved item).
Scoring is unchanged: an answer may still name items outside the list, and is scored as any other
answer.
"""

from __future__ import annotations

from collections import defaultdict

from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.data.catalog import KnowledgeGraph
from rectune.data.retrieval import CandidateRetriever
from rectune.data.titles import CatalogItem, display_title

FACTS_PER_ITEM = 8  # --candidate-facts: a prompt's length stays bounded on KGs listing whole casts


def candidate_facts(item_id: str, kg: KnowledgeGraph) -> str:
    """``director: michael mann; genre: crime`` (the KG's spelling, at most FACTS_PER_ITEM facts)."""
    facts = kg.facts(item_id)[:FACTS_PER_ITEM]
    return "; ".join(f"{relation.replace('_', ' ')}: {value}" for relation, value in facts)


ORDERS = ("title", "retriever")


def attach_candidates(
    rows: list[RecBenchRow],
    catalog: list[CatalogItem],
    kg: KnowledgeGraph,
    n: int,
    with_facts: bool = False,
    order: str = "title",
) -> CandidateRetriever:
    """Set each row's ``candidates`` (``{"id", "title", "rank"[, "facts"]}``) from its query text, listed
    by title or in the retriever's order (``order``), as the prompt will show them."""
    retriever = CandidateRetriever(catalog, kg)
    by_id = {item.id: item for item in catalog}
    for row, found in zip(rows, retriever.retrieve([row.query for row in rows], n), strict=True):
        candidates = []
        for rank, item_id in enumerate(found, start=1):
            candidate = {"id": item_id, "title": display_title(by_id[item_id].title), "rank": rank}
            if with_facts:
                candidate["facts"] = candidate_facts(item_id, kg)
            candidates.append(candidate)
        if order == "title":
            candidates.sort(key=lambda c: (c["title"].casefold(), c["id"]))
        row.candidates = candidates
    return retriever


def retriever_recall(rows: list[RecBenchRow]) -> dict[str, float | None]:
    """Mean recall@N of the rows' candidates, per task and over all (``"all"``); None where no row counts."""
    per_task: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        truth = set(row.ground_truth_ids)
        if truth and row.candidates is not None:
            shown = {candidate["id"] for candidate in row.candidates}
            per_task[row.task].append(len(truth & shown) / len(truth))
    values = [value for task_values in per_task.values() for value in task_values]
    recall = {task: round(sum(v) / len(v), 4) for task, v in sorted(per_task.items())}
    recall["all"] = round(sum(values) / len(values), 4) if values else None
    return recall
