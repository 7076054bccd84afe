"""Baselines without an LLM: each answer hand-computed on tiny data, fitting on training rows only."""

import pytest

from rectune.benchmarks import Resources
from rectune.benchmarks.baselines import Context
from rectune.benchmarks.llmrec.baselines import interactions_of
from rectune.benchmarks.llmrec.rows import LLMRecRow
from rectune.benchmarks.perrec.baselines import group_answers
from rectune.benchmarks.perrec.rows import PerRecRow
from rectune.benchmarks.recbench.baselines import training_interactions
from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.core.io import DataError, RecTuneError
from rectune.data.catalog import KnowledgeGraph
from rectune.data.collaborative import Interactions, fit_als, fit_itemknn, fit_rating_model, ranked
from rectune.data.titles import CatalogItem, TitleMatcher
from rectune.models.baselines import get_baseline, names_help

ITEMS = [
    CatalogItem("1", "Heat (1995)"),
    CatalogItem("2", "Ronin (1998)"),
    CatalogItem("3", "Casino (1995)"),
    CatalogItem("4", "Se7en (1995)"),
]
KG = KnowledgeGraph([("1", "Genre", "Crime"), ("3", "Genre", "Crime"), ("4", "Genre", "Thriller")])


def context(k=3):
    return Context(Resources.loaded(TitleMatcher(ITEMS), KG), k)


def query(id_, history=(), truth=("Heat (1995)",), truth_ids=("1",), user=None, conditions=(), candidates=None):
    return RecBenchRow(id_, "recbench+", "movie", "explicit", "films please", list(truth), list(truth_ids),
                       [list(c) for c in conditions], len(conditions), list(history), source_user=user,
                       candidates=candidates)  # fmt: skip


# u1 and u2 consumed Heat and Ronin, u1 also Casino: Heat 2, Ronin 2, Casino 1, Se7en 0
TRAIN = [
    query("t1", history=["Heat (1995)", "Ronin (1998)"], truth=["Casino (1995)"], truth_ids=["3"], user="u1"),
    query("t2", history=["Heat (1995)"], truth=["Ronin (1998)"], truth_ids=["2"], user="u2"),
]


def answer(name, rows, train=TRAIN, params=None, k=3):
    return get_baseline(f"baseline:{name}", "recbench+").answers(train, rows, params or {}, context(k))


def test_popularity_answers_the_most_consumed_items_the_user_has_not_seen():
    new_user, seen_heat = query("q1"), query("q2", history=["Heat (1995)"])
    answers = answer("popularity", [new_user, seen_heat])
    assert answers["q1"] == "Heat (1995) [SEP] Ronin (1998) [SEP] Casino (1995)"
    # q2's own history adds a third consumer of Heat, which it has seen: left out
    assert answers["q2"] == "Ronin (1998) [SEP] Casino (1995) [SEP] Se7en (1995)"


def test_popularity_ranks_only_the_candidates_of_a_grounded_row():
    grounded = query("g", candidates=[{"id": "4", "title": "Se7en (1995)", "rank": 1},
                                      {"id": "3", "title": "Casino (1995)", "rank": 2}])  # fmt: skip
    assert answer("popularity", [grounded]) == {"g": "Casino (1995) [SEP] Se7en (1995)"}


def test_ties_among_candidates_follow_the_retrievers_rank_not_the_order_they_are_listed_in():
    """Heat and Ronin both have 2 consumers. Ties kept the order the prompt listed the candidates in: on the same
    queries item-kNN scored NDCG@5 0.447 with them listed best first and 0.139 with them listed by title."""
    heat, ronin = {"id": "1", "title": "Heat (1995)", "rank": 2}, {"id": "2", "title": "Ronin (1998)", "rank": 1}
    by_title, best_first = query("t", candidates=[heat, ronin]), query("b", candidates=[ronin, heat])
    assert answer("popularity", [by_title, best_first], k=1) == {"t": "Ronin (1998)", "b": "Ronin (1998)"}
    unranked = query("u", candidates=[{k: v for k, v in c.items() if k != "rank"} for c in (heat, ronin)])
    assert answer("popularity", [unranked], k=1) == {"u": "Heat (1995)"}  # no ranks: the listed order


def test_itemknn_recommends_the_neighbours_of_the_history():
    train = [
        query("a", history=["Heat (1995)"], truth=["Ronin (1998)"], truth_ids=["2"], user="u1"),
        query("b", history=["Ronin (1998)"], truth=["Heat (1995)"], truth_ids=["1"], user="u2"),
        query("c", history=["Casino (1995)"], truth=["Se7en (1995)"], truth_ids=["4"], user="u3"),
    ]
    # Heat's users {u1, u2, q1}, Ronin's {u1, u2}: cosine 2 / sqrt(3 * 2) = 0.82; Casino and Se7en share none
    rows = [query("q1", history=["Heat (1995)"]), query("q2", history=["Casino (1995)"])]
    answers = answer("itemknn", rows, train, {"k": 10}, k=1)
    assert answers == {"q1": "Ronin (1998)", "q2": "Se7en (1995)"}


def test_a_held_out_querys_ground_truth_is_never_fitted_for_its_user():
    # u1's training query saw Casino in their history; the held-out query from u1 has Casino as its truth
    train = [query("t", history=["Heat (1995)", "Casino (1995)"], truth=["Ronin (1998)"], truth_ids=["2"], user="u1")]
    held_out = query("h", history=["Heat (1995)"], truth=["Casino (1995)"], truth_ids=["3"], user="u1")
    fitted = training_interactions(train, [held_out], context())
    assert fitted.ratings["u1"] == {"1": 1.0, "2": 1.0}
    assert "3" not in fitted.items()  # nobody else consumed it: the model never hears of Casino
    assert answer("popularity", [held_out], train)["h"] == "Ronin (1998) [SEP] Casino (1995) [SEP] Se7en (1995)"


def test_kg_oracle_names_the_items_meeting_every_condition_most_popular_first():
    crime = query("c", conditions=[("Genre", "Crime")])
    assert answer("kg-oracle", [crime]) == {"c": "Heat (1995) [SEP] Casino (1995)"}
    oracle = get_baseline("baseline:kg-oracle", "recbench+")
    assert oracle.ceiling and not oracle.answers_task("interest")


def test_bm25_answers_the_retrievers_top_k_from_the_stored_ranks():
    grounded = query("g", candidates=[{"id": "3", "title": "Casino (1995)", "rank": 3},
                                      {"id": "1", "title": "Heat (1995)", "rank": 2},
                                      {"id": "2", "title": "Ronin (1998)", "rank": 1}])  # fmt: skip
    assert answer("bm25", [grounded], k=2) == {"g": "Ronin (1998) [SEP] Heat (1995)"}
    unranked = query("u", candidates=[{"id": "1", "title": "Heat (1995)"}])
    with pytest.raises(DataError, match="no retriever rank"):
        answer("bm25", [unranked])


def test_ranked_keeps_the_pools_order_on_ties_and_puts_unscored_items_last():
    assert ranked({"a": 1.0, "b": 2.0, "c": 1.0}, ["d", "c", "a", "b"], {"b"}, 3) == ["c", "a", "d"]


def test_global_mean_predicts_the_mean_and_bias_orders_users_by_their_ratings():
    ratings = Interactions()
    for user, values in {"hi": [5, 5, 4], "lo": [1, 2, 1], "mid": [3, 3, 3]}.items():
        for item, value in zip("abc", values, strict=True):
            ratings.add(user, item, value)
    ratings.add("hi", "d", 5)
    ratings.add("lo", "d", 1)
    mean = fit_rating_model("global-mean", ratings, {})
    assert mean.scores("mid")["d"] == pytest.approx((5 + 5 + 4 + 1 + 2 + 1 + 3 + 3 + 3 + 5 + 1) / 11)
    bias = fit_rating_model("bias", ratings, {"lambda_reg": 0.02})
    assert bias.scores("hi")["a"] > bias.scores("mid")["a"] > bias.scores("lo")["a"]


@pytest.mark.parametrize("name", ["global-mean", "bias", "mf", "itemknn", "als"])
def test_nothing_left_to_fit_on_is_one_line(name):
    """A training split whose only ratings are the held-out queries' own: cornac's ValueError was a traceback."""
    ratings = Interactions()
    ratings.add("u", "a", 4)
    ratings.drop("u", ["a"])
    fits = {"itemknn": lambda: fit_itemknn(ratings, 5), "als": lambda: fit_als(ratings, 4, 0.01)}
    with pytest.raises(RecTuneError, match="no interactions to fit a baseline on: train.jsonl beside --data"):
        fits.get(name, lambda: fit_rating_model(name, ratings, {"lambda_reg": 0.02, "factors": 4}))()


def group(task, users, id_="g/x"):
    labelled = [{"label": "ABCD"[i], "user": u, "mean_rating": m, "history": [], "rating": 0, "relative_rating": 0}
                for i, (u, m) in enumerate(users)]  # fmt: skip
    return PerRecRow(id_, "perrecbench", "movies", task, "g", len(users), "hard", {"id": "i", "title": "Film"},
                     labelled, "")  # fmt: skip


def test_perrec_answers_follow_the_predicted_relative_rating():
    users = [("x", 4.0), ("y", 2.0), ("z", 3.0)]
    predicted = {("g", "x"): 4.5, ("g", "y"): 3.0, ("g", "z"): 2.5}  # relative +0.5, +1.0, -0.5
    rows = [group("pointwise", users[:1], "p"), group("pairwise", users[:2], "pw"), group("listwise", users, "l")]
    assert group_answers(rows, predicted, seed=0) == {"p": "4.5", "pw": "B", "l": "B > A > C"}


def test_perrec_ties_are_broken_by_seed_not_by_label():
    users = [("x", 3.0), ("y", 3.0)]
    tie = {("g", "x"): 3.0, ("g", "y"): 3.0}
    firsts = {group_answers([group("pairwise", users, "pw")], tie, seed)["pw"] for seed in range(20)}
    assert firsts == {"A", "B"}


def test_llmrec_interactions_leave_out_each_evaluated_rows_held_out_item():
    def row(task, user, history, item):
        seen = [{"id": i, "title": i, "rating": 4.0} for i in history]
        return LLMRecRow(f"{task}/{user}", "llmrec", "movies", task, user, seen, {"id": item, "title": item}, "5")

    train = [row("rating", "u", ["a", "b"], "c")]
    evaluated = [row("rating", "u", ["b", "c"], "d"), row("rating", "v", ["d"], "e")]
    fitted = interactions_of(train, evaluated, with_ratings=True)
    assert fitted.ratings == {"u": {"a": 4.0, "b": 4.0, "c": 4.0}, "v": {"d": 4.0}}
    assert "e" not in fitted.items()


def test_unknown_baseline_names_the_known_ones():
    with pytest.raises(RecTuneError, match="known: bm25, popularity, itemknn, als, kg-oracle"):
        get_baseline("baseline:bm52", "recbench+")
    assert "perrecbench: random, user-mean, bias, mf" in names_help()
    assert "kg-oracle (ceiling)" in names_help()
