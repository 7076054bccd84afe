"""PerRecBench: source readers, group construction (checked by hand), formats, Kendall's tau, rewards.

The fixture (tests/fixtures/ratings) holds the same ratings in the three source formats. Five
eligible users rated item X ("Rose Face Cream"); their means and relative ratings, by hand:

    user  F1 F2 X  mean  relative  X rated on day
    u1    2  2  5  3     +2        0
    u2    4  4  4  4      0        1
    u3    5  4  3  4     -1        2
    u5    3  4  2  3     -1        3
    u4    1  1  4  2     +2        10
    u6 rated only F1 besides X (day 0.5): one history item, below --min-history 2.

F1 and F2 ratings are 100 days apart, so only X forms groups. Window from u1 (day 0-7): u2 joins
(gap 2), u3 joins (gaps 3 and 1), u5 does not (gap 0 to u3), u4 is outside. Window from u5
(day 3-10, inclusive): u4 joins (gap 3). Difficulty: {u1,u2,u3} has 1 extra user and closest
gap 1.0 (not < 1.0) -> medium; {u5,u4} has gap 3 -> easy.
"""

import gzip
import json
import re
import shutil

import pytest
from conftest import ROOT, one_step_grpo_recipe, read_jsonl, read_view, run_script
from scipy.stats import kendalltau

from rectune.benchmarks import Resources, load_rows
from rectune.benchmarks.perrec import groups as grouping
from rectune.benchmarks.perrec import prompts, rewards, scoring
from rectune.benchmarks.perrec.profiles import profile_text
from rectune.benchmarks.perrec.rows import PerRecGroup, PerRecRow
from rectune.core.io import DataError
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import parse_rating, read_items, read_reviews
from rectune.evaluation.report_files import report_problem
from rectune.evaluation.scoring import score_benchmark

FIXTURES = ROOT / "tests" / "fixtures" / "ratings"
# the fixture's users rated their other items after X: history retrieval is tested with any-history
SETTINGS = grouping.GroupSettings(min_history=2, k=1, past_only=False)
STORE_2023 = RatingStore(read_reviews(FIXTURES / "reviews_2023.jsonl"), {})
ML_USERS = {str(i): f"u{i}" for i in range(1, 7)}
ML_ITEMS = {"1": "X", "2": "F1", "3": "F2"}


def normalised(reviews, movielens=False):
    def user(u):
        return ML_USERS[u] if movielens else u

    def item(i):
        return ML_ITEMS[i] if movielens else i

    return sorted((user(r.user), item(r.item), r.rating, r.timestamp) for r in reviews)


def test_the_three_source_formats_read_the_same_ratings(tmp_path):
    amazon_2023 = read_reviews(FIXTURES / "reviews_2023.jsonl")
    amazon_2018 = read_reviews(FIXTURES / "reviews_2018.json")
    movielens = read_reviews(FIXTURES / "ratings.dat")
    assert normalised(amazon_2023) == normalised(amazon_2018) == normalised(movielens, movielens=True)
    assert len(amazon_2023) == 17
    first = next(r for r in amazon_2023 if r.user == "u1" and r.item == "X")
    assert (first.timestamp, first.title, first.text) == (1_600_000_000, "5 stars", "u1 on X")  # ms -> s
    gz = tmp_path / "reviews.json.gz"
    with gzip.open(gz, "wt") as handle:
        handle.write((FIXTURES / "reviews_2018.json").read_text())
    assert normalised(read_reviews(gz)) == normalised(amazon_2018)


def test_item_metadata_in_every_format():
    for name in ("meta_2023.jsonl", "meta_2014.json"):  # 2014 metadata lines are Python literals
        items = read_items(FIXTURES / name)
        assert items["X"].title == "Rose Face Cream"
        assert items["X"].categories == ["Beauty", "Skin Care"]
        assert items["X"].description == "A rich rose cream."
    assert read_items(FIXTURES / "movies.dat")["1"].categories == ["Beauty", "Skin Care"]


def test_groups_by_hand():
    groups = list(grouping.find_groups(STORE_2023, SETTINGS))
    members = [[(m.user, m.relative) for m in g.members] for g in groups]
    assert members == [[("u1", 2.0), ("u2", 0.0), ("u3", -1.0)], [("u5", -1.0), ("u4", 2.0)]]
    assert [g.item for g in groups] == ["X", "X"]
    assert [g.difficulty for g in groups] == ["medium", "easy"]
    # a 6-day window leaves u4 (7 days after u5) out: u5 has no partner and u4 none either
    narrow = list(grouping.find_groups(STORE_2023, grouping.GroupSettings(6, 2)))
    assert [[m.user for m in g.members] for g in narrow] == [["u1", "u2", "u3"]]
    # gaps must exceed 1.5: u3 (1 from u2) no longer joins u1 and u2, and has no partner in its own window
    strict = grouping.GroupSettings(min_history=2, min_gap=1.5)
    groups = list(grouping.find_groups(STORE_2023, strict))
    assert [[m.user for m in g.members] for g in groups] == [["u1", "u2"], ["u5", "u4"]]
    # the paper's 20-item history requirement leaves nobody here
    assert list(grouping.find_groups(STORE_2023, grouping.GroupSettings())) == []


def test_difficulty_tiers():
    assert grouping.difficulty([1.0, -1.0], close_gap=1.0) == "easy"
    assert grouping.difficulty([1.0, 0.3], close_gap=1.0) == "medium"  # a near tie
    assert grouping.difficulty([2.0, 0.0, -1.0], close_gap=1.0) == "medium"  # a third user
    assert grouping.difficulty([2.0, 0.0, -0.7], close_gap=1.0) == "hard"
    assert grouping.difficulty([3.0, 1.5, 0.0, -1.5], close_gap=1.0) == "hard"


def test_bm25_scores_by_hand():
    import math

    bm25 = grouping.BM25({"a": ["rose", "soap"], "b": ["rose", "rose", "balm", "lip"], "c": ["tea"]})
    # idf(rose) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln 1.6, idf(soap) = ln(1 + 2.5 / 1.5) = ln(8/3);
    # average length 7/3; norm(a) = 1.5 * (0.25 + 0.75 * 2 / (7/3)) = 1.3393,
    # norm(b) = 1.5 * (0.25 + 0.75 * 4 / (7/3)) = 2.3036; weight = idf * tf * 2.5 / (tf + norm):
    # a = 0.4700 * 2.5 / 2.3393 + 0.9808 * 2.5 / 2.3393 = 0.5023 + 1.0482, b = 0.4700 * 5 / 4.3036
    norm_a, norm_b = 1.5 * (0.25 + 0.75 * 6 / 7), 1.5 * (0.25 + 0.75 * 12 / 7)
    expected_a = math.log(1.6) * 2.5 / (1 + norm_a) + math.log(8 / 3) * 2.5 / (1 + norm_a)
    expected_b = math.log(1.6) * 2 * 2.5 / (2 + norm_b)
    scores = bm25.scores(["rose", "soap", "rose"])
    assert scores.keys() == {"a", "b"}  # "c" shares no term: 0, left out
    assert scores["a"] == pytest.approx(expected_a) and scores["b"] == pytest.approx(expected_b)
    assert scores["a"] == pytest.approx(1.5505, abs=1e-4) and scores["b"] == pytest.approx(0.5461, abs=1e-4)


def test_bm25_sums_in_the_query_order_so_every_process_breaks_ties_alike():
    docs = {"x": ["drama", "war", "crime"], "y": ["drama"], "z": ["war", "comedy"],
            "w": ["comedy", "drama", "romance", "war"], "v": ["crime", "thriller"]}  # fmt: skip
    bm25 = grouping.BM25(docs)
    weight = bm25.weights["x"]
    # these three weights sum to different floats in different orders (a set's order varies by process)
    assert (weight["war"] + weight["drama"]) + weight["crime"] != (weight["crime"] + weight["war"]) + weight["drama"]
    assert bm25.scores(["war", "drama", "crime"])["x"] == (weight["war"] + weight["drama"]) + weight["crime"]
    # one document scored alone (a sampled build's short histories) makes the very same sum, bit for bit
    for query in (["war", "drama", "crime"], ["crime", "war", "drama"], ["comedy", "thriller"]):
        assert {doc: bm25.score(doc, query) for doc in bm25.scores(query)} == bm25.scores(query)
    assert bm25.score("y", ["crime"]) == 0.0 and bm25.score("unrated", ["war"]) == 0.0
    assert bm25.postings_cost(["war", "drama", "nowhere"]) == 3 + 3  # war: x z w; drama: x y w
    assert bm25.scores(["crime", "war", "drama"])["x"] == (weight["crime"] + weight["war"]) + weight["drama"]


def test_bm25_history_and_rows():
    reviews = read_reviews(FIXTURES / "reviews_2023.jsonl")
    items = read_items(FIXTURES / "meta_2023.jsonl")
    groups = list(grouping.find_groups(RatingStore(reviews, {}), SETTINGS))
    grouping.attach_prompts(groups, RatingStore(reviews, {}), items, SETTINGS)
    by_user = {u["user"]: u for u in groups[0].users}
    # "rose" is shared with the lip balm, not the soap: BM25 picks F2 for k=1
    assert by_user["u1"]["history"] == [{"title": "Rose Lip Balm", "rating": 2.0}]
    assert by_user["u3"]["mean_rating"] == 4.5  # shown mean: the user's other items only
    assert by_user["u1"]["relative_rating"] == 2.0
    rows = grouping.group_record(groups[0], items, "beauty").rows()
    assert [r.task for r in rows].count("pointwise") == 3
    assert sorted(r.id.rsplit("/", 1)[1] for r in rows if r.task == "pairwise") == ["AB", "AC", "BA", "BC", "CA", "CB"]
    listwise, reversed_order = [r for r in rows if r.task == "listwise"]
    label = {u["user"]: u["label"] for u in listwise.users}
    assert listwise.answer == f"{label['u1']} > {label['u2']} > {label['u3']}"
    assert [u["user"] for u in reversed_order.users] == [u["user"] for u in listwise.users][::-1]
    assert [u["label"] for u in reversed_order.users] == ["A", "B", "C"] and reversed_order.id.endswith("/reversed")
    label = {u["user"]: u["label"] for u in reversed_order.users}
    assert reversed_order.answer == f"{label['u1']} > {label['u2']} > {label['u3']}"
    for pair in (r for r in rows if r.task == "pairwise"):
        best = max(pair.users, key=lambda u: u["relative_rating"])
        assert [u["label"] for u in pair.users] == ["A", "B"] and pair.answer == best["label"]
    assert {r.answer for r in rows if r.task == "pointwise"} == {"5", "4", "3"}
    prompt = prompts.build_messages(listwise)[1]["content"]
    assert "Item: Rose Face Cream" in prompt and "Rose Lip Balm: 2" in prompt and 'e.g. "B > A > C"' in prompt
    assert "Rated 2 items" in prompt  # the template profile
    assert PerRecRow.from_dict(listwise.to_dict()) == listwise
    # by default only items rated before X may be shown: every user here rated F1 and F2 after X
    past_only = grouping.GroupSettings(min_history=2, k=1)
    grouping.attach_prompts(groups, RatingStore(reviews, {}), items, past_only)
    assert all(u["history"] == [] and u["profile"] == "No earlier ratings." for u in groups[0].users)
    assert by_user["u3"]["mean_rating"] == 4.5  # the shown mean is still over all other items
    assert grouping.members_without_earlier_ratings(groups[:1]) == 3


def test_profiles_read_well_at_every_count():
    from rectune.data.ratings import Review
    from rectune.data.titles import CatalogItem

    items = {i: CatalogItem(i, f"Film {i} (1990)", {"categories": ["Drama"]}) for i in "abcd"}

    def profile(*ratings):
        reviews = [
            Review("u", item, rating, 100 - n) for n, (item, rating) in enumerate(zip("abcd", ratings, strict=False))
        ]
        return profile_text(reviews, items, [0.5, 5.0, 0.5])

    assert profile(2.5) == "Rated 1 item: Film a (1990), 2.5/5. Most rated categories: Drama."
    assert profile(4, 4, 4) == "Rated 3 items, all 4/5. Most rated categories: Drama."
    assert profile(5, 1) == (
        "Rated 2 items, 3.0/5 on average. Most rated categories: Drama. "
        "Rated highest: Film a (1990). Rated lowest: Film b (1990)."
    )
    # 5, 3, 1: the middle film is a like (top two above the lowest), never a dislike as well
    assert profile(5, 3, 1).endswith("Rated highest: Film a (1990); Film b (1990). Rated lowest: Film c (1990).")
    # 5, 5, 2, 2 rated at times 100, 99, 98, 97: likes most recent first, dislikes oldest first among equals
    assert profile(5, 5, 2, 2).endswith(
        "Rated highest: Film a (1990); Film b (1990). Rated lowest: Film d (1990); Film c (1990)."
    )


def test_profiles_along_a_walk_equal_sorting_each_prefix():
    """The one-pass profile of every prefix equals the definition: sort the prefix, take likes and dislikes."""
    import random
    from collections import Counter

    from rectune.benchmarks.perrec.profiles import Profile
    from rectune.data.ratings import Review
    from rectune.data.titles import CatalogItem

    def by_sorting(reviews, items):  # the definition, written out the slow way
        ranked = sorted(reviews, key=lambda r: (-r.rating, -r.timestamp))
        ratings = {r.rating for r in reviews}
        liked = [r for r in ranked[:2] if r.rating > min(ratings)]
        disliked = [r for r in ranked[::-1] if r.rating < max(ratings) and r not in liked][:2]
        top = Counter(c for r in reviews for c in items[r.item].categories).most_common(3)
        return [len(reviews), sum(r.rating for r in reviews) / len(reviews), liked, disliked, top]

    rng = random.Random(0)
    genres = ["Drama", "Comedy", "War", "Crime"]
    items = {str(i): CatalogItem(str(i), f"Film {i}", {"categories": rng.sample(genres, 2)}) for i in range(40)}
    for _ in range(30):
        # bursts: many ratings share a second; ratings repeat, so ties are everywhere
        reviews = [
            Review("u", str(i), rng.choice([1.0, 3.0, 3.5, 5.0]), 100 + i // 4) for i in rng.sample(range(40), 25)
        ]
        profile = Profile(items, None)
        for n, review in enumerate(reviews, 1):
            profile.add(review)
            count, mean, liked, disliked, top = by_sorting(reviews[:n], items)
            text = profile.text()
            assert profile.count == count and profile.total / profile.count == mean
            if len({r.rating for r in reviews[:n]}) > 1:
                names = lambda rs: "; ".join(f"Film {r.item}" for r in rs)  # noqa: E731
                assert f"Rated highest: {names(liked)}. Rated lowest: {names(disliked)}." in text
            assert f"Most rated categories: {', '.join(c for c, _ in top)}." in text


def test_tau_b_with_ties_by_hand():
    # x = [1, 2, 3, 4], y = [1, 1, 2, 3]: of 6 pairs, 5 concordant, none discordant, 1 tied in y only
    # tau-b = (C - D) / sqrt((n0 - n1) (n0 - n2)) = 5 / sqrt(6 * 5)
    assert scoring.tau([1, 2, 3, 4], [1, 1, 2, 3]) == pytest.approx(5 / 30**0.5)
    # ties on both sides, x = [1, 1, 2, 3], y = [1, 2, 2, 3]: C = 4, one tie in each -> 4 / sqrt(5 * 5)
    assert scoring.tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)
    # pairwise wins tie often: 4 users winning 2, 1, 1, 0 pairs against truth order 4 > 3 > 2 > 1
    # C = 5 (every pair but the tied middle one), D = 0, n2 = 1 -> 5 / sqrt(6 * 5)
    assert scoring.tau([4.0, 3.0, 2.0, 1.0], [2.0, 1.0, 1.0, 0.0]) == pytest.approx(5 / 30**0.5)


def test_tau_matches_scipy():
    cases = [([2, 0, -1], [1, 3, 2]), ([1, 2, 3, 4], [4, 3, 2, 1]), ([0.5, -1, 2, 0], [1, 1, 0, 2])]
    for truth, predicted in cases:
        assert scoring.tau(truth, predicted) == pytest.approx(kendalltau(truth, predicted).statistic)
    assert scoring.tau([2, 0, -1], [2, 0, 1]) == pytest.approx(1 / 3)  # by hand: 2 concordant, 1 discordant
    assert scoring.tau([2, 0, -1], [1, 1, 1]) == 0.0  # no predicted order at all


def test_parsing():
    assert parse_rating("I think 4.5 stars") == 4.5
    assert parse_rating("Rating: 3") == 3.0
    assert parse_rating("10 out of 10") is None and parse_rating("") is None
    assert prompts.parse_choice("User B liked it more than User A") == "B"
    assert prompts.parse_choice("A") == "A"
    assert prompts.parse_choice("neither") is None
    # a verbose answer names both letters: the one it states, or the one nearest before "more", is its choice
    assert prompts.parse_choice("Between User A and User B, User B liked the item more.") == "B"  # was A
    assert prompts.parse_choice("Looking at A and B... **Answer:** B") == "B"  # was A
    assert prompts.parse_choice("A closer look: User B enjoyed it more than User A") == "B"
    assert prompts.parse_choice("A: 4.2 vs B: 3.9, so A") == "A"
    assert prompts.parse_choice("The answer is a close call: B") == "B"  # "a" is no letter of the labels
    assert prompts.parse_choice("User A rated it 4. **Answer:** **B**") == "B"
    assert prompts.parse_ranking("C > A > B", ["A", "B", "C"]) == ["C", "A", "B"]
    assert prompts.parse_ranking("1. User B\n2. User A\n3. User C", ["A", "B", "C"]) == ["B", "A", "C"]
    assert prompts.parse_ranking("B > A", ["A", "B", "C"]) is None
    assert prompts.parse_ranking("A closer look: B > C > A", ["A", "B", "C"]) == ["B", "C", "A"]  # was A, B, C


def user(label, name, mean, relative):
    return {"label": label, "user": name, "mean_rating": mean, "history": [], "rating": mean + relative,
            "relative_rating": relative}  # fmt: skip


def hand_rows() -> list[PerRecRow]:
    """One 3-user group (relative +2, 0, -1; shown means 3, 4, 4) in each format."""
    u1, u2, u3 = user("A", "u1", 3, 2), user("A", "u2", 4, 0), user("A", "u3", 4, -1)
    item = {"id": "X", "title": "Rose Face Cream"}

    def row(task, suffix, users, answer):
        return PerRecRow(f"g/{task}/{suffix}", "perrecbench", "beauty", task, "g", 3, "medium", item, users, answer)

    def pair(a, b):
        return [{**a, "label": "A"}, {**b, "label": "B"}]

    listwise = [{**u1, "label": "B"}, {**u2, "label": "C"}, {**u3, "label": "A"}]
    return [
        row("pointwise", "0", [u1], "5"),
        row("pointwise", "1", [u2], "4"),
        row("pointwise", "2", [u3], "3"),
        row("pairwise", "12", pair(u1, u2), "A"),
        row("pairwise", "13", pair(u1, u3), "A"),
        row("pairwise", "23", pair(u2, u3), "A"),
        row("listwise", "", listwise, "B > C > A"),
    ]


def test_group_scores_by_hand():
    rows = hand_rows()
    predictions = {
        # pointwise: predicted relative = 2-3, 4-4, 5-4 = -1, 0, 1: the reverse order -> tau -1
        "g/pointwise/0": "2",
        "g/pointwise/1": "4",
        "g/pointwise/2": "I'd say 5",
        # pairwise: u1 beats u2 and u3, u3 beats u2: wins 2, 0, 1 -> order u1 > u3 > u2 -> tau 1/3
        "g/pairwise/12": "A",
        "g/pairwise/13": "User A",
        "g/pairwise/23": "B",
        "g/listwise/": "I cannot tell",  # unparseable: a failure
    }
    report, table = score_benchmark(rows, predictions, Resources("unused"))
    assert report["by_task"]["pointwise"]["tau"] == pytest.approx(-1.0)
    assert report["by_task"]["pairwise"]["tau"] == pytest.approx(1 / 3)
    assert report["by_task"]["listwise"] == {
        "n": 1, "tau": 0.0, "tau_parsed": None, "failure_rate": 1.0, "position_following": None,
    }  # fmt: skip
    overall = report["overall"]
    assert overall["tau"] == pytest.approx((-1 + 1 / 3 + 0) / 3)
    assert overall["tau_parsed"] == pytest.approx((-1 + 1 / 3) / 2)
    assert overall["failure_rate"] == pytest.approx(1 / 3)
    assert report["by_task_difficulty"]["pairwise"]["medium"]["tau"] == pytest.approx(1 / 3)
    assert report_problem(json.loads(json.dumps(report))) is None  # compare reads it back as written
    assert "| listwise | all | 1 | 0.000 | - | 1.000 | - |" in report["table"]
    assert len(table) == 7
    predictions["g/listwise/"] = "B > C > A"  # the true order
    report, _ = score_benchmark(rows, predictions, Resources("unused"))
    assert report["by_task"]["listwise"]["tau"] == 1.0


def test_position_fair_scoring_by_hand():
    """Both orders of every pair and the listwise group reversed: a model answering "A" whatever it is shown ties
    every pair and every listwise place, so τ is 0 and all its answers follow position."""
    u1, u2, u3 = user("A", "u1", 3, 2), user("B", "u2", 4, 0), user("C", "u3", 4, -1)
    group = PerRecGroup("g", "perrecbench", "beauty", "medium", {"id": "X", "title": "Rose Face Cream"}, [u1, u2, u3])
    rows = group.rows()
    assert [r.id for r in rows if r.task != "pointwise"] == [
        "g/pairwise/AB", "g/pairwise/BA", "g/pairwise/AC", "g/pairwise/CA", "g/pairwise/BC", "g/pairwise/CB",
        "g/listwise", "g/listwise/reversed",
    ]  # fmt: skip
    always_first = {r.id: "A" if r.task == "pairwise" else "A > B > C" for r in rows if r.task != "pointwise"}
    always_first.update({r.id: "3" for r in rows if r.task == "pointwise"})
    report, _ = score_benchmark(rows, always_first, Resources("unused"))
    for task in ("pairwise", "listwise"):
        assert report["by_task"][task]["tau"] == 0.0 and report["by_task"][task]["position_following"] == 1.0
    assert report["by_task"]["pointwise"]["position_following"] is None
    # a preference, kept whatever the order: u1 over everyone, u3 over u2 (wins 4, 0, 2 -> u1 > u3 > u2: tau 1/3);
    # listwise u2 > u1 > u3 both times: stored order "B > A > C", reversed (u3 u2 u1 as A B C) "B > C > A"
    prefer = {"u1": 2, "u3": 1, "u2": 0}
    consistent = dict(always_first)
    for r in rows:
        if r.task == "pairwise":
            consistent[r.id] = max(r.users, key=lambda u: prefer[u["user"]])["label"]
    consistent["g/listwise"], consistent["g/listwise/reversed"] = "B > A > C", "B > C > A"
    report, _ = score_benchmark(rows, consistent, Resources("unused"))
    assert report["by_task"]["pairwise"]["tau"] == pytest.approx(1 / 3)
    assert report["by_task"]["pairwise"]["position_following"] == 0.0
    # places summed over both orders: u2 0 + 0, u1 1 + 1, u3 2 + 2 -> u2 > u1 > u3 against truth u1 > u2 > u3:
    # pairs (u1,u2) discordant, (u1,u3) and (u2,u3) concordant -> tau 1/3
    assert report["by_task"]["listwise"]["tau"] == pytest.approx(1 / 3)
    assert report["by_task"]["listwise"]["position_following"] == 0.0  # "B" first both times, but B is u2 both times
    consistent["g/listwise/reversed"] = "B > A > C"  # now "B" is first again, but it is u2 then... still u2
    report, _ = score_benchmark(rows, consistent, Resources("unused"))
    assert report["by_task"]["listwise"]["position_following"] == 0.0
    consistent["g/listwise"], consistent["g/listwise/reversed"] = "A > B > C", "A > B > C"  # u1 first, then u3
    report, _ = score_benchmark(rows, consistent, Resources("unused"))
    assert report["by_task"]["listwise"]["position_following"] == 1.0
    # one pair answered "A" both ways (u2 over u3, then u3 over u2), the other two by preference: 1 of 3 pairs
    consistent["g/pairwise/BC"] = "A"
    report, _ = score_benchmark(rows, consistent, Resources("unused"))
    assert report["by_task"]["pairwise"]["position_following"] == pytest.approx(1 / 3)


def test_rewards_follow_the_scoring():
    # pointwise, user u1 (true relative +2 of [2, 0, -1], mean 3) predicts 1: relative -2 -> [-2, 0, -1]
    # against [2, 0, -1]: pairs (1,2) and (1,3) discordant, (2,3) concordant -> tau -1/3
    def reward(task, text, labels, relative, means, group_relative, position):
        return rewards.ranking([text], [task], [labels], [relative], [means], [group_relative], [position])[0]

    assert reward("pointwise", "1", ["A"], [2.0], [3.0], [2.0, 0.0, -1.0], 0) == pytest.approx(-1 / 3)
    assert reward("pointwise", "5", ["A"], [2.0], [3.0], [2.0, 0.0, -1.0], 0) == pytest.approx(1.0)
    assert reward("pointwise", "no idea", ["A"], [2.0], [3.0], [2.0, 0.0, -1.0], 0) == -1.0
    assert reward("pairwise", "B", ["A", "B"], [0.5, -1.0], [3, 3], [], -1) == -1.0
    assert reward("pairwise", "User A", ["A", "B"], [0.5, -1.0], [3, 3], [], -1) == 1.0
    assert reward("listwise", "C > B > A", ["A", "B", "C"], [2, 0, -1], [3] * 3, [], -1) == -1.0
    assert reward("listwise", "A > C > B", ["A", "B", "C"], [2, 0, -1], [3] * 3, [], -1) == pytest.approx(1 / 3)
    assert reward("listwise", "A > B", ["A", "B", "C"], [2, 0, -1], [3] * 3, [], -1) == -1.0
    assert rewards.format(["A > B", "4"], ["listwise", "pointwise"], [["A", "B", "C"], ["A"]]) == [0.0, 1.0]


@pytest.fixture(scope="module")
def perrec_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("perrec")
    result = run_script(
        "data_prep/perrecbench.py", "--reviews", FIXTURES / "ratings.dat", "--items", FIXTURES / "movies.dat",
        "--domain", "beauty", "--min-history", "2", "--k", "1", "--test-size", "0.0", "--out", out,
    )  # fmt: skip
    assert "2 groups: 2 train / 0 test" in result.stdout
    return out


def test_data_prep_writes_every_format(perrec_data):
    counts = {}
    for task in ("pointwise", "pairwise", "listwise"):
        sft = read_view(perrec_data / f"train_sft_{task}.jsonl")
        rft = read_view(perrec_data / f"train_rft_{task}.jsonl")
        assert len(sft) == len(rft)
        counts[task] = len(sft)
    # group sizes 3 and 2: pointwise 3 + 2 rows, pairwise (3 + 1) pairs in both orders, listwise 2 orders each
    assert counts == {"pointwise": 5, "pairwise": 8, "listwise": 4}
    assert not list(perrec_data.glob("*_mix.jsonl"))  # recipes list the three files; no duplicated copy
    rft = read_view(perrec_data / "train_rft_pointwise.jsonl")
    for example in rft:
        assert example["group_relative"][example["position"]] == example["relative"][0]
    stats = json.loads((perrec_data / "stats.json").read_text())
    assert stats["train"]["by_difficulty"] == {"easy": 1, "medium": 1, "hard": 0}


def test_max_groups_keeps_a_stratified_sample_and_the_totals(tmp_path):
    out = tmp_path / "sample"
    result = run_script(
        "data_prep/perrecbench.py", "--reviews", FIXTURES / "ratings.dat", "--items", FIXTURES / "movies.dat",
        "--domain", "beauty", "--min-history", "2", "--k", "1", "--test-size", "0.0", "--max-groups", "1",
        "--out", out,
    )  # fmt: skip
    assert "2 groups (a sample of 1): 1 train / 0 test" in result.stdout
    stats = json.loads((out / "stats.json").read_text())
    # the two groups are one easy, one medium: one place, equal remainders, the first stratum found keeps it
    sampling = stats["sampling"]
    assert sampling["groups"] == {"found": 2, "kept": 1} and sampling["found"] == {"easy": 1, "medium": 1}
    assert sampling["stratified_by"] == "difficulty" and sum(sampling["kept"].values()) == 1
    kept = [d for d, n in sampling["kept"].items() if n]
    assert stats["train"]["by_difficulty"] == {d: int(d in kept) for d in ("easy", "medium", "hard")}
    assert len(read_jsonl(out / "train.jsonl")) == 1


def test_split_is_by_item(tmp_path):
    reviews = read_reviews(ROOT / "tests" / "fixtures" / "ratings" / "ratings.dat")
    groups = list(grouping.find_groups(RatingStore(reviews, {}), SETTINGS))
    groups += [grouping.Group(f"Y#{i}", "Y", groups[0].members) for i in range(3)]
    train, test = grouping.split_by_item(groups, 0.5, seed=0)
    assert {g.item for g in train}.isdisjoint({g.item for g in test}) and len(train) + len(test) == 5


def test_evaluate_scores_perrec_rows(tmp_path, perrec_data):
    out = tmp_path / "data"
    shutil.copytree(perrec_data, out)
    # the fixture's split puts both groups in train: write their canonical rows as the test file
    reviews = read_reviews(FIXTURES / "ratings.dat")
    groups = list(grouping.find_groups(RatingStore(reviews, {}), SETTINGS))
    grouping.attach_prompts(groups, RatingStore(reviews, {}), read_items(FIXTURES / "movies.dat"), SETTINGS)
    rows = [r for g in groups for r in grouping.group_record(g, {}, "beauty").rows()]
    (out / "test.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("".join(json.dumps({"id": r.id, "completion": r.answer}) + "\n" for r in rows))
    result = run_script(
        "evaluate/score.py", "--data", out / "test.jsonl", "--predictions", predictions, "--out", tmp_path / "r.json"
    )
    report = json.loads((tmp_path / "r.json").read_text())
    # the true answers name the same user in both orders: none follows position
    assert report["overall"] == {"n": 6, "tau": 1.0, "tau_parsed": 1.0, "failure_rate": 0.0, "position_following": 0.0}
    assert "| pairwise | all | 2 |" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"reviewerID": "u1", "asin": "X", "unixReviewTime": 1}\n',
            "reviews.json:1: key 'overall': expected a number",
        ),
        ('{"user_id": "u1", "rating": 4, "timestamp": 1}\n', "reviews.json:1: missing key 'parent_asin' or 'asin'"),
        ('{"reviewerID": "u1", "asin": "X", "overall": 5, "unixReviewTime": 1}\n{oops\n', "reviews.json:2: malformed"),
        ('{"who": "u1"}\n', "reviews.json:1: not an Amazon review"),
        ("", "reviews.json: empty file"),
        (
            '{"reviewerID": "u1", "asin": "X", "overall": 17, "unixReviewTime": 1}\n',
            "reviews.json:1: key 'overall': rating 17 is outside the scale 1-5",
        ),
        (
            '{"reviewerID": "u1", "asin": "X", "overall": Infinity, "unixReviewTime": 1}\n',
            "reviews.json:1: key 'overall': expected a finite number, got inf",
        ),
        (
            '{"user_id": "u1", "parent_asin": "X", "rating": 4, "timestamp": 1e309}\n',
            "reviews.json:1: key 'timestamp': expected a finite number, got inf",
        ),
        (
            '{"user_id": "u1", "parent_asin": "X", "rating": 4, "timestamp": -5}\n',
            "reviews.json:1: key 'timestamp': timestamp -5 is not a date between 1970 and 2100 in milliseconds",
        ),
    ],
)
def test_bad_reviews_fail_clearly(tmp_path, content, message):
    path = tmp_path / "reviews.json"
    path.write_text(content)
    with pytest.raises(DataError) as error:
        read_reviews(path)
    assert message in str(error.value)


def test_gzip_files_that_are_not_gzip_or_not_utf8(tmp_path):
    fake = tmp_path / "reviews.json.gz"
    fake.write_text('{"reviewerID": "u1"}\n')
    with pytest.raises(DataError, match="reviews.json.gz: not a readable gzip file"):
        read_reviews(fake)
    latin = tmp_path / "ratings.dat.gz"
    with gzip.open(latin, "wb") as handle:
        handle.write(b"1::2::5::978300760\n" + "1::3::4::978300761\n".encode("latin-1"))
    assert [r.item for r in read_reviews(latin)] == ["2", "3"]
    items = tmp_path / "movies.dat.gz"
    with gzip.open(items, "wb") as handle:
        handle.write("1::Cité des enfants perdus, La (1995)::Drama\n".encode("latin-1"))
    assert read_items(items)["1"].title == "Cité des enfants perdus, La (1995)"


def test_bad_inputs_on_the_command_line(tmp_path):
    bad = tmp_path / "ratings.dat"
    bad.write_text("1::2::5::100\n1::3\n")
    result = run_script("data_prep/perrecbench.py", "--reviews", bad, "--domain", "x", "--out", tmp_path / "o",
                        check=False)  # fmt: skip
    assert result.returncode != 0 and "ratings.dat:2: expected 4 '::'-separated fields" in result.stderr
    result = run_script("data_prep/perrecbench.py", "--reviews", tmp_path / "none.json", "--domain", "x", "--out",
                        tmp_path / "o", check=False)  # fmt: skip
    assert "none.json: file not found" in result.stderr
    result = run_script("data_prep/perrecbench.py", "--reviews", FIXTURES / "ratings.dat", "--domain", "x", "--out",
                        tmp_path / "o", check=False)  # fmt: skip
    assert "error: no groups" in result.stderr and ">= 20 other ratings" in result.stderr
    assert not (tmp_path / "o").exists()  # nothing half-written
    result = run_script("data_prep/perrecbench.py", "--reviews", FIXTURES / "ratings.dat", "--domain", "x", "--out",
                        tmp_path / "o", "--test-size", "1.5", check=False)  # fmt: skip
    assert result.returncode == 2 and "--test-size: expected a number between 0 and 1, got 1.5" in result.stderr


def test_canonical_perrec_rows_are_validated(tmp_path):
    row = hand_rows()[0].to_dict()
    path = tmp_path / "test.jsonl"
    for broken, message in [
        ({**row, "task": "triplewise"}, "field 'task': must be one of pointwise, pairwise, listwise"),
        ({k: v for k, v in row.items() if k != "group"}, "field 'group': missing"),
        ({**row, "users": [{"label": "A"}]}, "field 'users': entry 0 has no 'user'"),
        ({**row, "extra": 1}, "field 'extra': unknown field"),
        ({**row, "benchmark": "nope"}, "field 'benchmark': must be one of recbench+, perrecbench, llmrec"),
    ]:
        path.write_text(json.dumps(broken) + "\n")
        with pytest.raises(DataError, match=re.escape(message)):
            load_rows(path)


def test_grpo_with_the_ranking_reward(tmp_path, tiny_model, perrec_data):
    files = [str(perrec_data / f"train_rft_{task}.jsonl") for task in ("pointwise", "pairwise", "listwise")]
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, files[0], tmp_path / "rft", max_completion_length=6,
        datasets=[{"path": "json", "data_files": files}],
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe)
    assert "rewards/ranking/mean" in result.stdout + result.stderr
    bad = one_step_grpo_recipe(tmp_path / "b.yaml", tiny_model, files[0], tmp_path / "o", reward_funcs=["recall"])
    result = run_script("train/grpo.py", bad, check=False)
    assert "unknown perrecbench reward 'recall'; choose from ranking, format" in result.stderr


def test_compare_shows_perrec_metrics(tmp_path):
    from rectune.evaluation.compare import comparison_rows, markdown, metric_specs, write_outputs
    from rectune.evaluation.report_files import load_reports

    rows = hand_rows()
    # B = u1 (+2), C = u2 (0), A = u3 (-1): "C > B > A" swaps only u1 and u2 -> (2 - 1) / 3
    for name, listwise in (("a", "B > C > A"), ("b", "C > B > A")):
        report, _ = score_benchmark(
            rows, {r.id: listwise if r.task == "listwise" else "" for r in rows}, Resources("x")
        )
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps(report))
    reports = load_reports([tmp_path / "a", tmp_path / "b"])
    compared, specs = comparison_rows(reports), metric_specs(reports)
    listwise = {r["checkpoint"]: r for r in compared if r["task"] == "listwise"}
    assert listwise["a"]["tau"] == 1.0 and listwise["b"]["tau"] == pytest.approx(1 / 3)
    assert "| task | checkpoint | n | τ | τ (parsed) | fail |" in markdown(compared, specs)
    paths = [tmp_path / f"cmp{suffix}" for suffix in (".md", ".csv", ".png")]
    write_outputs(compared, specs, paths)
    assert all(path.is_file() for path in paths)


def test_a_stored_group_is_validated_and_named_in_errors(tmp_path):
    from rectune.benchmarks import load_rows

    user = {"user": "u", "mean_rating": 3.0, "history": [], "rating": 4.0, "relative_rating": 1.0}
    users = [{**user, "label": "A"}, {**user, "label": "C"}]
    group = {"id": "7#0", "benchmark": "perrecbench", "domain": "movies", "difficulty": "easy",
             "item": {"id": "7", "title": "Heat"}, "users": users}  # fmt: skip
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(group) + "\n")
    with pytest.raises(DataError, match=r"test.jsonl:1: row '7#0', field 'users': must be 2 to 8 users"):
        load_rows(path)
    group["users"][1]["label"] = "B"
    group["users"][1]["rating"], group["users"][1]["relative_rating"] = 2.0, -1.0
    path.write_text(json.dumps({**group, "answer": "A"}) + "\n")
    with pytest.raises(DataError, match="field 'answer': unknown field"):
        load_rows(path)
    path.write_text(json.dumps(group) + "\n")
    rows = load_rows(path)
    assert [(r.id, r.answer) for r in rows] == [
        ("7#0/pointwise/0", "4"), ("7#0/pointwise/1", "2"), ("7#0/pairwise/AB", "A"), ("7#0/pairwise/BA", "B"),
        ("7#0/listwise", "A > B"), ("7#0/listwise/reversed", "B > A"),
    ]  # fmt: skip
    assert {r.group_size for r in rows} == {2} and rows[1].users[0]["label"] == "A"  # a lone user is A
