"""Metric values below are computed by hand from the rows, catalog and KG in this file."""

import math

import pytest

from rectune.benchmarks.recbench.metrics import aggregate, dcg, format_table, score_query
from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.data.catalog import KnowledgeGraph
from rectune.data.titles import CatalogItem, TitleMatcher

MATCHER = TitleMatcher(
    [
        CatalogItem("1", "Heat (1995)"),
        CatalogItem("2", "Ronin (1998)"),
        CatalogItem("3", "Usual Suspects, The (1995)"),
        CatalogItem("9", "City of Lost Children, The (1995)"),
        CatalogItem("12", "Toy Story (1995)"),
        CatalogItem("13", "Casino (1995)"),
    ]
)
KG = KnowledgeGraph(
    [
        ("1", "Starring", "Robert De Niro"),
        ("1", "genre", "Thriller"),
        ("2", "Starring", "Robert De Niro"),
        ("2", "genre", "Thriller"),
        ("13", "genre", "Thriller"),  # Casino: the KG has no "starring" fact for it
        ("3", "Director", "Bryan Singer"),
    ]
)


def row(id_, task, truth, ids, conditions=()):
    return RecBenchRow(
        id=id_,
        benchmark="recbench+",
        domain="movie",
        task=task,
        query="q",
        ground_truth=truth,
        ground_truth_ids=ids,
        conditions=[list(c) for c in conditions],
        condition_num=len(conditions),
    )


DE_NIRO = row(
    "a",
    "explicit",
    ["Heat (1995)", "Ronin (1998)"],
    ["1", "2"],
    [("Starring", "Robert De Niro"), ("Genre", "Thriller")],
)
EMPTY = row("b", "explicit", ["Heat (1995)"], ["1"], [("Genre", "Thriller")])
SINGER = row("c", "implicit", ["The Usual Suspects (1995)"], ["3"], [("Director", "Bryan Singer")])
INTEREST = row("d", "interest", ["City of Lost Children, The (1995)", "Unknown Film (1999)"], ["9"])

COMPLETIONS = {
    "a": "1. Heat (1995)\n2. Casino (1995)\n3. Made Up Movie\n4. Heat",
    "b": "",
    "c": "Usual Suspects, The",
    "d": "Unknown Film\nToy Story (1995)",
}


def score(r):
    return score_query(r, MATCHER.extract(COMPLETIONS[r.id]), MATCHER, KG)


def test_query_with_hallucination_and_duplicate():
    s = score(DE_NIRO)
    # recommended: Heat, Casino, "made up movie" (the second Heat collapses) -> 3 items, 1 hit
    assert s.n_recommended == 3
    assert s.precision == pytest.approx(1 / 3)
    assert s.recall == pytest.approx(1 / 2)
    # only Heat meets both conditions; Casino lacks the starring fact, the invented title is unknown
    assert s.cmr == pytest.approx(1 / 3)
    assert s.ftr == 0.0
    assert (s.n_resolved, s.n_kg_covered) == (2, 1)
    # Heat (a hit) is named first: DCG 1 / IDCG (1 + 1/log2 3)
    assert s.ndcg == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_ndcg_counts_the_rank_of_hits():
    late = score_query(DE_NIRO, MATCHER.extract("Casino [SEP] Toy Story [SEP] Ronin"), MATCHER, KG)
    # Ronin hits at rank 3: (1/log2 4) / (1 + 1/log2 3)
    assert late.ndcg == pytest.approx(0.5 / (1 + 1 / math.log2(3)))
    assert late.recall == pytest.approx(1 / 2)


def test_empty_answer_convention():
    s = score(EMPTY)
    assert (s.precision, s.recall, s.cmr, s.ftr) == (0.0, 0.0, 0.0, 1.0)


def test_moved_article_is_a_hit():
    s = score(SINGER)
    assert (s.precision, s.recall, s.cmr, s.ftr) == (1.0, 1.0, 1.0, 0.0)


def test_unresolvable_ground_truth_can_still_be_hit_by_name():
    s = score(INTEREST)
    assert s.precision == pytest.approx(1 / 2)
    assert s.recall == pytest.approx(1 / 2)
    assert s.cmr is None  # profile-based: no conditions


def test_aggregate_macro_averages():
    report = aggregate([vars(score(r)) for r in (DE_NIRO, EMPTY, SINGER, INTEREST)])
    overall = report["overall"]
    assert overall["n"] == 4
    assert overall["precision"] == pytest.approx((1 / 3 + 0 + 1 + 1 / 2) / 4)
    assert overall["recall"] == pytest.approx((1 / 2 + 0 + 1 + 1 / 2) / 4)
    assert overall["cmr"] == pytest.approx((1 / 3 + 0 + 1) / 3)  # condition-based queries only
    assert overall["ftr"] == pytest.approx(1 / 4)
    ideal_two = 1 + 1 / math.log2(3)  # two ground-truth items
    # hits at rank 1 for a (of 2 truths), c (of 1) and d (of 2); none for b
    assert overall["ndcg"] == pytest.approx((1 / ideal_two + 0 + 1 + 1 / ideal_two) / 4)
    assert overall["kg_coverage"] == pytest.approx((1 + 1) / (2 + 1))  # covered / resolved items
    explicit = report["by_task"]["explicit"]
    assert explicit["n"] == 2
    assert explicit["precision"] == pytest.approx(1 / 6)
    assert explicit["recall"] == pytest.approx(1 / 4)
    assert explicit["cmr"] == pytest.approx(1 / 6)
    assert explicit["ftr"] == pytest.approx(1 / 2)
    assert report["by_task"]["interest"]["cmr"] is None
    assert report["by_task_conditions"]["explicit"]["2"]["precision"] == pytest.approx(1 / 3)
    assert report["by_task_conditions"]["explicit"]["1"]["ftr"] == 1.0
    assert "interest" not in report["by_task_conditions"]
    table = format_table(report)
    assert table.splitlines()[0] == (
        "| task | n | P@K | R@K | NDCG@K | P | R | NDCG | CMR | FTR | KG cov. | Rep. | Distinct | Cand. R |"
    )
    # a's answer names Heat twice: 1 of 2 explicit answers repeats itself; 3 + 0 distinct titles.
    # At K = 5: a has 1 hit among its 3 items (P@5 1/5), b none: 0.100; R@5 and NDCG@5 as R and NDCG
    # (no answer names more than 5 items); no row is grounded, so no candidate recall.
    assert (
        "| explicit | 2 | 0.100 | 0.250 | 0.307 | 0.167 | 0.250 | 0.307 | 0.167 | 0.500 | 0.500 | 0.500 | 1.500 | - |"
        in table
    )
    assert (
        "| interest | 1 | 0.200 | 0.500 | 0.613 | 0.500 | 0.500 | 0.613 | - | 0.000 | - | 0.000 | 2.000 | - |" in table
    )


def test_fixed_k_metrics_ignore_items_past_k_and_divide_by_k():
    truth = row("k", "explicit", ["Heat (1995)", "Made Up"], ["1"])  # one resolved truth, one only by name
    # 7 distinct titles named; hits at ranks 2 (Heat) and 7 (Made Up, the unresolved truth)
    named = (
        "Casino (1995) [SEP] Heat (1995) [SEP] Nowhere One [SEP] Nowhere Two [SEP] Nowhere Three [SEP] "
        "Nowhere Four [SEP] Made Up"
    )
    s = score_query(truth, MATCHER.extract(named), MATCHER, KG, k=5)
    assert s.distinct == 7 and s.recall == 1.0
    assert s.precision_at_k == pytest.approx(1 / 5)  # only Heat within the first 5
    assert s.recall_at_k == pytest.approx(1 / 2)
    ideal = 1 + 1 / math.log2(3)  # min(5, 2 truths) hits at ranks 1 and 2
    assert s.ndcg_at_k == pytest.approx((1 / math.log2(3)) / ideal)
    short = score_query(truth, MATCHER.extract("Heat (1995)"), MATCHER, KG, k=5)
    assert (short.precision, short.precision_at_k) == (1.0, pytest.approx(1 / 5))  # fewer items: no gain at K


def test_candidate_recall_is_the_share_of_truth_the_candidates_hold():
    grounded = row("g2", "explicit", ["Heat (1995)", "Ronin (1998)"], ["1", "2"])
    grounded.candidates = [{"id": "1", "title": "Heat (1995)", "rank": 1}, {"id": "9", "title": "X", "rank": 2}]
    s = score_query(grounded, MATCHER.extract(""), MATCHER, KG)
    assert s.candidate_recall == pytest.approx(1 / 2)
    assert (
        score_query(row("c", "explicit", ["Heat (1995)"], ["1"]), MATCHER.extract(""), MATCHER, KG).candidate_recall
        is None
    )


def test_degenerate_answers_show_as_repetition_while_the_scores_count_each_title_once():
    godfather = row("g", "explicit", ["Heat (1995)"], ["1"])
    repeated = MATCHER.extract("Heat (1995) [SEP] Heat (1995) [SEP] Heat (1995) [SEP] Made Up [SEP] Made Up")
    assert (repeated.named, repeated.count) == (5, 2)
    s = score_query(godfather, repeated, MATCHER, KG)
    assert (s.repeated, s.distinct, s.precision, s.recall) == (1.0, 2, 0.5, 1.0)
    clean = score_query(godfather, MATCHER.extract("Heat (1995) [SEP] Ronin (1998)"), MATCHER, KG)
    assert (clean.repeated, clean.distinct) == (0.0, 2)
    overall = aggregate([vars(s), vars(clean)])["overall"]
    assert (overall["repeated"], overall["distinct"]) == (0.5, 2.0)


def test_condition_buckets():
    four = row("e", "explicit", ["Heat (1995)"], ["1"], [("a", "b")] * 4)
    report = aggregate([vars(score_query(four, MATCHER.extract("Heat"), MATCHER, KG))])
    assert list(report["by_task_conditions"]["explicit"]) == ["3-4"]


def test_counting_met_conditions_at_once_agrees_with_item_by_item():
    conditions = [["Starring", "Robert De Niro"], ["genre", "thriller"]]
    items = ["1", "2", "13", "3", "404"]
    assert KG.count_met(items, conditions) == (2, 2)  # Heat and Ronin; Casino lacks "starring", 3 and 404 all
    assert [KG.satisfies(i, conditions) for i in items] == [True, True, False, False, False]
    assert KG.count_met(items, []) == (5, 5)  # no condition: every item meets it, known or not
    assert KG.count_met(["1", "2", "13"], [["genre", "drama"]]) == (0, 3)  # covered, and none a drama


def test_discounted_gain_counts_hits_by_rank():
    assert dcg(["a", "x", "b"], {"a", "b"}) == pytest.approx(1 + 1 / 2)  # ranks 1 and 3: 1/log2(2) + 1/log2(4)
    assert dcg([str(i) for i in range(100)], {"99"}) == pytest.approx(1 / math.log2(101))  # past the precomputed 64
