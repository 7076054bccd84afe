"""Candidate retrieval for grounded prompts: BM25 over each item's title, catalog attributes and KG facts.

An item's document is its title in natural spelling, then its catalog attributes and KG facts as
``relation value`` words (``Heat (1995) genres Crime director michael mann``); a query is the user's request text and
nothing else, so the retriever never sees a query's ground truth or conditions. Scoring is the
`bm25s <https://github.com/xhluca/bm25s>`_ package's Lucene BM25 (k1 1.5, b 0.75, English stop words
removed): a query word ``t`` adds ``idf(t) · tf / (tf + k1 · (1 − b + b · len/avglen))`` with
``idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))``.

The candidates handed to a prompt are sorted by title, not by score, so their order says nothing
about which one the retriever (or the ground truth) prefers.
"""

from __future__ import annotations

import logging

import numpy as np

from rectune.data.catalog import KnowledgeGraph
from rectune.data.titles import CatalogItem, display_title

logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs each index build at DEBUG


_NOT_DESCRIPTIVE = ("merged_ids", "name")  # catalog attributes that say nothing the title does not


def item_document(item: CatalogItem, kg: KnowledgeGraph) -> str:
    """The text an item is found by: its title, its catalog attributes, then its KG facts."""
    words = [display_title(item.title)]
    for key, value in item.attributes.items():
        values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        if key not in _NOT_DESCRIPTIVE and values and all(isinstance(v, str) for v in values):
            words.append(f"{key} {' '.join(values)}")
    words += [f"{relation.replace('_', ' ')} {value}" for relation, value in kg.facts(item.id)]
    return " ".join(words)


class CandidateRetriever:
    """BM25 over a catalog's item documents; :meth:`retrieve` returns item ids, best first."""

    name = "bm25 (bm25s, lucene) over title, attributes and KG facts"

    def __init__(self, items: list[CatalogItem], kg: KnowledgeGraph):
        import bm25s  # with scipy.sparse, a fifth of a second: scoring imports this module and never retrieves
        from bm25s.tokenization import Tokenizer

        self.items = list(items)
        self._tokenizer = Tokenizer(stopwords="en")
        documents = self._tokenizer.tokenize(
            [item_document(item, kg) for item in self.items], return_as="ids", show_progress=False
        )
        self._index = bm25s.BM25()
        self._index.index(documents, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every item for ``query``, in catalog order."""
        tokens = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        return np.asarray(self._index.get_scores(tokens), dtype=np.float64)

    def retrieve(self, queries: list[str], n: int) -> list[list[str]]:
        """The ``n`` best item ids per query, best first (ties, and items scoring 0, in catalog order)."""
        positions = np.arange(len(self.items))
        ranked = []
        for query in queries:
            order = np.lexsort((positions, -self.scores(query)))[:n]  # by score, then catalog position
            ranked.append([self.items[index].id for index in order])
        return ranked
