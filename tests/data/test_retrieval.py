"""BM25 candidate retrieval: scores and rankings computed by hand from the Lucene BM25 formula."""

import math

import pytest

from rectune.data.catalog import KnowledgeGraph
from rectune.data.retrieval import CandidateRetriever, item_document
from rectune.data.titles import CatalogItem

ITEMS = [
    CatalogItem("a", "Heat (1995)"),
    CatalogItem("b", "Alien (1979)", {"genres": ["Horror"], "merged_ids": ["9"]}),
    CatalogItem("c", "Jaws (1975)"),
]
KG = KnowledgeGraph(
    [
        ("a", "Director", "Michael Mann"),
        ("a", "Genre", "Crime"),
        ("c", "Genre", "Horror"),
        ("c", "Director", "Steven Spielberg"),
    ]
)
K1, B = 1.5, 0.75


def lucene(tf: int, df: int, length: int, average: float, n: int = 3) -> float:
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + K1 * (1 - B + B * length / average))


def test_documents_hold_title_attributes_and_facts():
    assert item_document(ITEMS[0], KG) == "Heat (1995) director michael mann genre crime"
    assert item_document(ITEMS[1], KG) == "Alien (1979) genres Horror"  # merged_ids says nothing
    assert item_document(ITEMS[2], KG) == "Jaws (1975) director steven spielberg genre horror"


def test_scores_follow_lucene_bm25_by_hand():
    # token counts: Heat 7, Alien 4 (alien 1979 genres horror), Jaws 7; average 6
    retriever = CandidateRetriever(ITEMS, KG)
    horror = retriever.scores("Something horror, please")  # "something", "please" are in no document
    # horror: df 2, idf ln(1 + 1.5/2.5) = 0.4700; Alien 0.4700 * 1/2.125 = 0.2212; Jaws 0.4700 * 1/2.6875 = 0.1749
    assert horror[0] == 0.0
    assert horror[1] == pytest.approx(lucene(1, 2, 4, 6.0), rel=1e-5) == pytest.approx(0.221178, rel=1e-4)
    assert horror[2] == pytest.approx(lucene(1, 2, 7, 6.0), rel=1e-5) == pytest.approx(0.174885, rel=1e-4)
    # three words only Heat has: 3 * ln(1 + 2.5/1.5) * 1/2.6875 = 1.0949
    mann = retriever.scores("a crime film by Michael Mann")
    assert mann[0] == pytest.approx(3 * lucene(1, 1, 7, 6.0), rel=1e-5) == pytest.approx(1.094877, rel=1e-4)


def test_retrieve_ranks_by_score_then_catalog_order():
    retriever = CandidateRetriever(ITEMS, KG)
    assert retriever.retrieve(["horror", "Michael Mann", "nothing matches"], 2) == [
        ["b", "c"],
        ["a", "b"],  # one match, then the zero scores in catalog order
        ["a", "b"],
    ]
    assert retriever.retrieve(["horror"], 10) == [["b", "c", "a"]]  # N above the catalog: all of it
