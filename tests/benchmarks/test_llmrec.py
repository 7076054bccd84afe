"""LLMRec: 5-core and leave-one-out on fixtures in both Amazon formats, prompts, metrics by hand, rewards.

Fixture (tests/fixtures/amazon): users U0-U5 each review six of the items I0-I6 (user Uj skips Ij)
on consecutive days, rating 1 + (u + 2j) mod 5. Outside the 5-core: U9 (two reviews) and I7
(reviewed by U9 and U0; once U9 is gone, by U0 alone). So the core is 6 users, 7 items, 36 reviews.
U1's reviews in time order: I0 I2 I3 I4 I5 I6; test target I6 "Vitamin C Serum" (rating
1 + (1 + 12) mod 5 = 4), training target I5 "Clay Face Mask" (1 + 11 mod 5 = 2).
"""

import glob
import json
import math

import pytest
from conftest import ROOT, one_step_grpo_recipe, read_jsonl, read_view, run_script, wandb_run

from rectune.benchmarks import Resources, load_rows
from rectune.benchmarks.llmrec import LLMRec, build, prompts, rewards, scoring
from rectune.benchmarks.llmrec.rows import LLMRecRow
from rectune.core.io import DataError
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import Review, read_items
from rectune.data.titles import CatalogItem, TitleMatcher
from rectune.evaluation.report_files import report_problem
from rectune.evaluation.scoring import score_benchmark

FIXTURES = ROOT / "tests" / "fixtures" / "amazon"


@pytest.fixture(scope="module", params=["2018", "2023"])
def prepared(request, tmp_path_factory):
    reviews, meta = {
        "2018": ("reviews_2018.json", "meta_2018.json"),
        "2023": ("reviews_2023.jsonl", "meta_2023.jsonl"),
    }[request.param]
    out = tmp_path_factory.mktemp(f"llmrec{request.param}")
    result = run_script(
        "data_prep/llmrec.py", "--reviews", FIXTURES / reviews, "--items", FIXTURES / meta, "--domain", "beauty",
        "--out", out, "--num-candidates", "4",
    )  # fmt: skip
    assert "39 reviews -> 5-core: 6 users, 7 items" in result.stdout
    return out


def test_max_users_samples_by_activity_and_keeps_the_totals(tmp_path):
    out = tmp_path / "sample"
    run_script(
        "data_prep/llmrec.py", "--reviews", FIXTURES / "reviews_2018.json", "--items", FIXTURES / "meta_2018.json",
        "--domain", "beauty", "--out", out, "--num-candidates", "4", "--max-users", "3", "--valid-size", "0",
    )  # fmt: skip
    stats = json.loads((out / "stats.json").read_text())
    # the 5-core's 6 users have 5 to 9 reviews each: one stratum, 3 of its 6 kept
    assert stats["sampling"] == {
        "users": {"found": 6, "kept": 3}, "stratified_by": "activity", "seed": 42,
        "found": {"1-9": 6}, "kept": {"1-9": 3},
    }  # fmt: skip
    assert stats["core"]["users"] == 6  # the unsampled total
    assert len({row["user"] for row in read_jsonl(out / "test.jsonl")}) == 3
    assert {row["user"] for row in read_jsonl(out / "train.jsonl")} == {
        row["user"] for row in read_jsonl(out / "test.jsonl")
    }


def test_k_core_is_iterative():
    with RatingStore(FIXTURES / "reviews_2018.json", {}) as store:
        counts = store.k_core(5)
        assert sum(counts.values()) == 36
        assert set(counts) == {f"U{u}" for u in range(6)}
        assert store.core_items() == [f"I{j}" for j in range(7)]
    # 2-core: d (one rating) goes; then z (c's only) has one; then c (x only) has one; a and b stay
    reviews = [Review(u, i, 4.0, n) for n, (u, i) in enumerate(["ax", "ay", "bx", "by", "cx", "cz", "dz", "ax"])]
    with RatingStore(reviews, {}) as store:
        assert store.k_core(2) == {"a": 2, "b": 2}  # a's second rating of x counts once
        assert store.core_items() == ["x", "y"]
        assert store.core_tied_last() == 0
    # a's last two ratings share a second: the tie rule picked its test target
    tied = [Review("a", "x", 4.0, 5), Review("a", "y", 3.0, 9), Review("a", "z", 2.0, 9), Review("b", "x", 1.0, 1)]
    with RatingStore(tied, {}) as store:
        store.k_core(1)
        assert store.core_tied_last() == 1


def test_the_unreviewed_pool_is_the_list_it_stands_for():
    import random

    # 200 items: random.sample indexes the pool (above 85 it does not copy it into a list)
    all_items = [f"i{n:03d}" for n in range(200)]
    positions = {item: n for n, item in enumerate(all_items)}
    for reviewed in [set(), {"i000"}, {"i199"}, {"i000", "i001", "i015", "i198", "i199"}, set(all_items[:-1])]:
        pool = build.Unreviewed(all_items, positions, reviewed | {"not-in-the-core"})
        listed = [i for i in all_items if i not in reviewed]
        assert len(pool) == len(listed) and list(pool) == listed
        with pytest.raises(IndexError):
            pool[len(listed)]
        k = min(19, len(listed))  # the same draws as from the list: candidates do not change
        assert random.Random(3).sample(pool, k) == random.Random(3).sample(listed, k)


def test_leave_one_out_rows_in_both_formats(prepared):
    test = {r.id: r for r in load_rows(prepared / "test.jsonl")}
    assert len(test) == 30  # 6 users x 5 tasks
    rating = test["rating/U1"]
    assert (rating.item["title"], rating.target) == ("Vitamin C Serum", "4")
    assert [h["id"] for h in rating.history] == ["I0", "I2", "I3", "I4", "I5"]
    assert test["summarization/U1"].target == "Great serum"
    assert test["summarization/U1"].review == "User 1 says the vitamin c serum is great."
    assert test["explanation/U1"].target == "User 1 says the vitamin c serum is great."
    direct = test["direct/U1"]
    ids = [c["id"] for c in direct.candidates]
    assert sorted(ids) == ["I1", "I6"]  # the target plus unreviewed items: U1 left only I1 (fewer than 4)
    assert len(test["direct/U0"].candidates) == 2  # U0 reviewed everything but I0
    assert "candidates" not in test["sequential/U1"].to_dict()
    rft = {e["id"]: e for e in read_view(prepared / "train_rft_rating.jsonl")}
    assert (rft["rating/U1"]["item_id"], rft["rating/U1"]["target"]) == ("I5", "2")  # the training target
    sft = read_view(prepared / "train_sft_rating.jsonl")
    assert [e["messages"][-1]["content"] for e in sft] == [e["target"] for e in rft.values()]
    assert len(read_view(prepared / "train_sft_mix.jsonl")) == 30
    assert read_view(prepared / "train_rft_direct.jsonl")[0]["candidate_ids"]
    assert len(read_jsonl(prepared / "catalog.jsonl")) == 7


def test_direct_sft_target_is_a_ranked_list_of_up_to_ten_candidates_true_item_first():
    def direct(n_candidates: int) -> LLMRecRow:
        titles = [f"Item {i}" for i in range(n_candidates)]
        candidates = [{"id": f"I{i}", "title": t} for i, t in enumerate(titles)]
        return LLMRecRow("direct/u", "llmrec", "beauty", "direct", "u", [], {"id": "I3", "title": "Item 3"},
                         "Item 3", candidates=candidates)  # fmt: skip

    benchmark = LLMRec()
    # 20 candidates: the held-out I3, then the first 9 others as listed (I3 skipped where the prompt shows it)
    others = ["Item 0", "Item 1", "Item 2", "Item 4", "Item 5", "Item 6", "Item 7", "Item 8", "Item 9"]
    assert benchmark.answer(direct(20), {}).split("\n") == ["Item 3", *others]
    assert benchmark.answer(direct(4), {}) == "Item 3\nItem 0\nItem 1\nItem 2"  # fewer than 10: all of them
    sequential = LLMRecRow("sequential/u", "llmrec", "beauty", "sequential", "u", [], {"id": "I3", "title": "Item 3"},
                           "Item 3")  # fmt: skip
    assert benchmark.answer(sequential, {}) == "Item 3"  # no candidates to rank: the held-out title


def test_three_part_prompt():
    row = LLMRecRow("rating/u", "llmrec", "beauty", "rating", "u", [{"id": "I0", "title": "Rose Face Cream",
                    "rating": 5.0}], {"id": "I1", "title": "Lavender Soap"}, "4")  # fmt: skip
    text = prompts.build_messages(row)[1]["content"]
    description, behaviour, item, fmt = text.split("\n\n")
    assert description == prompts.DESCRIPTIONS["rating"]
    assert behaviour == "The user's earlier reviews, oldest first:\n1. Rose Face Cream (rated 5)"
    assert item == "Item: Lavender Soap" and fmt == "Answer with a single number from 1 to 5."


MATCHER = TitleMatcher([CatalogItem(f"I{j}", t) for j, t in enumerate(["Rose Face Cream", "Lavender Soap",
                        "Argan Hair Oil", "Mint Lip Balm", "Shea Body Butter"])])  # fmt: skip


def make_row(task, target, item="I0", candidates=None, review=None):
    title = MATCHER.items[item].title
    return LLMRecRow(f"{task}/{target}", "llmrec", "beauty", task, "u", [], {"id": item, "title": title}, target,
                     candidates, review)  # fmt: skip


def test_rating_metrics_by_hand():
    rows = [make_row("rating", t) for t in ("4", "2", "5")]
    predictions = {"rating/4": "5", "rating/2": "I'd say 3.5", "rating/5": "no idea"}
    report, _ = score_benchmark(rows, predictions, Resources("unused"))
    summary = report["by_task"]["rating"]
    # errors +1 and +1.5; the third is N/A
    assert summary["rmse"] == pytest.approx(math.sqrt((1 + 2.25) / 2))
    assert summary["mae"] == pytest.approx(1.25)
    assert summary["na_rate"] == pytest.approx(1 / 3)


def test_ranking_metrics_by_hand(tmp_path):
    rows = [
        make_row("sequential", "Rose Face Cream", "I0"),
        make_row("sequential", "Lavender Soap", "I1"),
        make_row("sequential", "Argan Hair Oil", "I2"),
        make_row("direct", "Mint Lip Balm", "I3", candidates=[{"id": "I1", "title": "x"}, {"id": "I3", "title": "y"}]),
    ]
    predictions = {
        "sequential/Rose Face Cream": "Rose Face Cream\nLavender Soap",  # rank 0
        "sequential/Lavender Soap": "1. Argan Hair Oil\n2. Mint Lip Balm\n3. Shea Body Butter\n4. Rose Face Cream\n"
        "5. Lavender Soap",  # rank 4
        "sequential/Argan Hair Oil": "I don't know",  # N/A
        # Rose Face Cream is not a candidate and does not count: Mint Lip Balm is at rank 1, not 2
        "direct/Mint Lip Balm": "Lavender Soap\nRose Face Cream\nMint Lip Balm",
    }
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text("".join(json.dumps({"id": i.id, "title": i.title}) + "\n" for i in MATCHER.items.values()))
    report, _ = score_benchmark(rows, predictions, Resources(tmp_path / "test.jsonl"))
    seq = report["by_task"]["sequential"]
    assert seq["hr@1"] == pytest.approx(1 / 3) and seq["ndcg@1"] == pytest.approx(1 / 3)
    assert seq["hr@5"] == pytest.approx(2 / 3)
    assert seq["ndcg@5"] == pytest.approx((1 + 1 / math.log2(6)) / 3)
    assert seq["na_rate"] == pytest.approx(1 / 3)
    direct = report["by_task"]["direct"]
    assert (direct["hr@1"], direct["hr@5"]) == (0.0, 1.0)
    assert direct["ndcg@5"] == pytest.approx(1 / math.log2(3))
    assert report_problem(json.loads(json.dumps(report))) is None  # compare reads it back as written


def test_text_metrics_by_hand():
    # BLEU-4: n-gram precisions 6/7, 5/6, 4/5, 3/4, brevity penalty 1 -> (3/7) ** (1/4)
    # ROUGE-1 and ROUGE-L F: P 6/7, R 1 -> 12/13; ROUGE-2: P 5/6, R 1 -> 10/11
    scores = scoring.text_scores(["the cat sat on the mat today"], ["the cat sat on the mat"])
    assert scores["bleu4"] == pytest.approx(100 * (3 / 7) ** 0.25)
    assert scores["rouge1"] == pytest.approx(100 * 12 / 13)
    assert scores["rouge2"] == pytest.approx(100 * 10 / 11)
    assert scores["rougeL"] == pytest.approx(100 * 12 / 13)
    title = "A great serum for dry skin"  # BLEU-4 needs 4-grams: a two-word title scores 0 even when exact
    rows = [make_row("summarization", title, review="..."), make_row("explanation", "so so")]
    report, _ = score_benchmark(rows, {f"summarization/{title}": title, "explanation/so so": " "}, Resources("x"))
    assert report["by_task"]["summarization"]["bleu4"] == pytest.approx(100.0)
    assert report["by_task"]["explanation"]["rougeL"] == 0.0 and report["by_task"]["explanation"]["na_rate"] == 1.0
    assert "| summarization | 1 | 100.00 | 100.00 | 100.00 | 100.00 | 0.0000 |" in report["table"]


def test_rewards_follow_the_metrics():
    resources = Resources.loaded(MATCHER)

    def task(kind, text, target, item_id, candidate_ids):
        return rewards.task([text], [kind], [target], [item_id], [candidate_ids], resources=resources)[0]

    def fmt(kind, text, target, item_id, candidate_ids):
        return rewards.format([text], [kind], [target], [item_id], [candidate_ids], resources=resources)[0]

    assert task("rating", "3", "4", "I0", []) == pytest.approx(0.75)
    assert task("rating", "?", "4", "I0", []) == -1.0 and fmt("rating", "?", "4", "I0", []) == 0.0
    assert task("sequential", "Lavender Soap\nRose Face Cream", "Rose Face Cream", "I0", []) == pytest.approx(
        1 / math.log2(3)
    )
    assert task("direct", "Rose Face Cream", "Rose Face Cream", "I0", ["I1"]) == 0.0  # not a candidate
    assert task("summarization", "great serum", "Great serum", "I0", []) == pytest.approx(1.0)


def test_bad_inputs(tmp_path):
    path = tmp_path / "reviews.json"
    path.write_text('{"reviewerID": "U1", "asin": "I1", "overall": "five", "unixReviewTime": 1}\n')
    result = run_script("data_prep/llmrec.py", "--reviews", path, "--domain", "b", "--out", tmp_path / "o", check=False)
    assert "reviews.json:1: key 'overall': expected a number, got 'five'" in result.stderr
    path.write_text('{"reviewerID": "U1", "asin": "I1", "overall": 5, "unixReviewTime": 1}\n')
    result = run_script("data_prep/llmrec.py", "--reviews", path, "--domain", "b", "--out", tmp_path / "o", check=False)
    assert "error: no user" in result.stderr and "5-core" in result.stderr
    assert not (tmp_path / "o").exists()
    rows = tmp_path / "test.jsonl"
    good = make_row("rating", "4").to_dict()
    rows.write_text(json.dumps({**good, "target": "four"}) + "\n")
    with pytest.raises(DataError, match="a rating task needs a numeric target"):
        load_rows(rows)
    rows.write_text(json.dumps({**good, "task": "rank"}) + "\n")
    with pytest.raises(DataError, match="field 'task': must be one of rating, sequential"):
        load_rows(rows)


def test_items_without_metadata_are_named_by_id(tmp_path):
    items = read_items(FIXTURES / "meta_2018.json")
    assert items["I3"].title == "Mint Lip Balm"
    with RatingStore(FIXTURES / "reviews_2018.json", {}) as store:
        train, test, _, _ = build.build_rows(store, {}, "b", build.BuildSettings(), 0)
    assert test[0].item["title"].startswith("item I")


def test_evaluate_and_grpo_run_on_llmrec_data(tmp_path, tiny_model):
    data = tmp_path / "data"
    run_script(
        "data_prep/llmrec.py", "--reviews", FIXTURES / "reviews_2023.jsonl", "--items", FIXTURES / "meta_2023.jsonl",
        "--domain", "beauty", "--out", data, "--num-candidates", "4",
    )  # fmt: skip
    out = tmp_path / "report"
    result = run_script(
        "evaluate/run.py", "--model", tiny_model, "--data", data / "test.jsonl", "--out", out,
        "--max-new-tokens", "6", "--batch-size", "8",
    )  # fmt: skip
    assert "| task | n | RMSE | MAE | N/A |" in result.stdout and "| summarization | 6 |" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert set(report["by_task"]) == {"rating", "sequential", "direct", "explanation", "summarization"}
    (run_file,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    summary = wandb_run(run_file)["summary"]
    for task, metric in (("direct", "ndcg@10"), ("explanation", "rougeL"), ("rating", "na_rate")):
        assert summary[f"{task}/{metric}"] == report["by_task"][task][metric]
    assert summary["overall/na_rate"] == report["overall"]["na_rate"] and summary["per_query/nrows"] == 30

    recipe = one_step_grpo_recipe(tmp_path / "g.yaml", tiny_model, data / "train_rft_mix.jsonl", tmp_path / "rft")
    result = run_script("train/grpo.py", recipe)
    assert "rewards/task/mean" in result.stdout + result.stderr
    recorded = json.loads((tmp_path / "rft" / "finished.json").read_text())
    assert recorded["rewards"] == ["task", "format"]  # the benchmark's default rewards, recorded
    assert "reward_funcs" not in (tmp_path / "rft" / "recipe.yaml").read_text()  # derived again on rerun


def test_hit_rate_and_ndcg_at_10_by_hand():
    words = ["Amber", "Birch", "Cedar", "Dahlia", "Elm", "Fern", "Ginger", "Hazel", "Iris", "Juniper", "Kelp", "Lotus"]
    catalog = TitleMatcher([CatalogItem(f"W{j}", f"{w} Soap") for j, w in enumerate(words)])
    rows = [
        LLMRecRow(f"sequential/{target}", "llmrec", "beauty", "sequential", "u", [], {"id": target, "title": "x"}, "x")
        for target in ("W6", "W9", "W11")
    ]
    answer = "\n".join(f"{w} Soap" for w in words)  # the twelve items in order: W6 is 7th, W9 10th, W11 12th
    scores = scoring.score_queries(rows, {r.id: answer for r in rows}, catalog)
    summary = scoring.summarize("sequential", scores, ["x"] * 3)
    assert (summary["hr@5"], summary["hr@10"]) == (0.0, pytest.approx(2 / 3))  # W11 is beyond the top 10
    # NDCG@10 of one relevant item at 1-based position p is 1 / log2(p + 1): positions 7 and 10, then 0
    assert summary["ndcg@10"] == pytest.approx((1 / math.log2(8) + 1 / math.log2(11)) / 3)
    assert summary["ndcg@5"] == 0.0


def test_corpus_bleu_over_sentences_with_a_brevity_penalty_by_hand():
    # hypotheses of 6 and 3 words against references of 7 and 7: every n-gram of the hypotheses is in
    # its reference (precisions 9/9, 7/7, 5/5, 3/3), so BLEU-4 is the brevity penalty exp(1 - 14 / 9)
    hypotheses = ["the cat sat on the mat", "a dog ran"]
    references = ["the cat sat on the mat today", "a dog ran fast in the park"]
    assert scoring.text_scores(hypotheses, references)["bleu4"] == pytest.approx(100 * math.exp(1 - 14 / 9))


def test_a_rating_baseline_on_other_tasks_says_the_filter_left_none(prepared, tmp_path):
    from test_hostile import one_line

    result = run_script("evaluate/run.py", "--model", "baseline:global-mean", "--data", prepared / "test.jsonl",
                        "--out", tmp_path / "bias", "--task", "direct", "--no-wandb", check=False)  # fmt: skip
    one_line(result, "baseline:global-mean answers rating queries", "has none of the tasks chosen (--task direct)")
