"""The ReRec protocol (data_prep --rerec): one true item and N negatives per query, one boxed pick, its rewards."""

import json

import pytest
from conftest import RELEASE, read_view, run_script

from rectune.benchmarks import Resources, get_benchmark, load_rows
from rectune.benchmarks.recbench.rerec import boxed_answer, boxed_contents, wrong_pick_lines
from rectune.benchmarks.recbench.rewards import boxed_format, item_alignment, ndcg_at_k
from rectune.evaluation.scoring import score_files
from rectune.training.rewards import rft_resources


def prepare(out, *extra):
    run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "0.3",
        "--valid-size", "0.0", "--rerec", "--rerec-negatives", "3", *extra,
    )  # fmt: skip
    rows = load_rows(out / "train.jsonl") + load_rows(out / "test.jsonl")
    return {row.id: row for row in rows}


def test_boxed_answers_by_hand():
    assert boxed_contents("I pick \\boxed{Heat (1995)}") == ["Heat (1995)"]
    assert boxed_contents("\\boxed{Heat} then \\boxed{ Ronin }") == ["Heat", "Ronin"]
    assert boxed_contents("\\boxed{\\text{Heat}}") == ["\\text{Heat}"]  # braces inside are matched
    assert boxed_contents("\\boxed{Heat") == []  # never closed: no answer
    assert boxed_answer("\\boxed{Heat} on second thought \\boxed{Ronin}") == "Ronin"  # the last box counts
    assert boxed_answer("Heat (1995)") == ""
    # a box is LaTeX: the title a reasoning model typesets in it is read as text (each was a miss and a wrong pick)
    assert boxed_answer("$\\boxed{\\text{Heat (1995)}}$") == "Heat (1995)"
    assert boxed_answer("\\boxed{\\textbf{\\emph{Ocean's\\ Eleven}}}") == "Ocean's Eleven"
    assert boxed_answer("\\boxed{\\text{Fast \\& Furious}}") == "Fast & Furious"
    assert boxed_answer("\\boxed{\\text{Am\\'{e}lie}}") == "Amelie"
    assert boxed_answer("\\boxed{\\mathrm{Heat}~(1995)}") == "Heat (1995)"
    assert boxed_format(["$\\boxed{\\text{Heat}}$", "\\[\\boxed{Heat}\\]", "\\boxed{Heat}.", "\\boxed{\\text{}}"]) == [
        0.5, 0.5, 0.5, -0.5]  # fmt: skip


def test_wrong_pick_lines_by_hand():
    candidates = {"1": "Heat (1995)", "3": "Jaws (1975)", "4": "Alien (1979)"}
    text = "Jaws is a thriller.\nHeat it is.\n\\boxed{Heat (1995)}\nNot ALIEN, not Jawsome."
    # line 4 names Alien (any case); "Jawsome" is not Jaws (whole words only)
    assert wrong_pick_lines(text, {"1"}, candidates) == [True, False, False, True]
    assert wrong_pick_lines("\\boxed{Jaws (1975)}", {"1"}, candidates) == [True]


def test_rows_carry_one_positive_and_seeded_negatives(tmp_path):
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", tmp_path / "plain",
               "--test-size", "0.0", "--valid-size", "0.0")  # fmt: skip
    truths = {row.id: set(row.ground_truth_ids) for row in load_rows(tmp_path / "plain" / "train.jsonl")}
    rows = prepare(tmp_path / "a")
    again = prepare(tmp_path / "b")
    assert {i: r.candidates for i, r in rows.items()} == {i: r.candidates for i, r in again.items()}  # seeded
    for row_id, row in rows.items():
        shown = [c["id"] for c in row.candidates]
        assert len(shown) == 4 and len(set(shown)) == 4
        assert row.ground_truth_ids[0] in truths[row_id] and len(row.ground_truth_ids) == 1  # the positive
        assert not (set(shown) - set(row.ground_truth_ids)) & truths[row_id]  # negatives are never true items
        assert sorted(c["rank"] for c in row.candidates) == [1, 2, 3, 4]
    assert set(rows) == {row_id for row_id, truth in truths.items() if truth}  # left out: no resolved true item
    stats = json.loads((tmp_path / "a" / "stats.json").read_text())
    assert stats["prompt"]["protocol"] == "rerec" and stats["prompt"]["k"] == 1 and stats["prompt"]["candidates"] == 4


def test_prompt_and_target(tmp_path):
    rows = prepare(tmp_path)
    rft = {r["id"]: r for r in read_view(tmp_path / "train_rft.jsonl")}
    row_id, example = next(iter(rft.items()))
    system, user = example["prompt"][0]["content"], example["prompt"][1]["content"]
    assert system == (
        "You are a movie recommender system. You are given a list of candidate movies and a query from the user. "
        "Think about which candidate best satisfies the user's query, then give exactly one movie from the "
        "candidates as your final answer, written as \\boxed{title}."
    )
    listed = "".join(f"- {c['title']}\n" for c in rows[row_id].candidates)
    ask = "Your pick (one movie, as \\boxed{title}):"
    assert user == f"Candidate movies:\n{listed}Query: {rows[row_id].query}\n{ask}"
    sft = {r["messages"][1]["content"]: r["messages"][2]["content"] for r in read_view(tmp_path / "train_sft.jsonl")}
    positive = next(c["title"] for c in rows[row_id].candidates if c["id"] == rows[row_id].ground_truth_ids[0])
    assert sft[user] == f"\\boxed{{{positive}}}"


def test_scoring_reads_the_last_boxed_title_at_k_1(tmp_path):
    prepare(tmp_path / "data")
    test_rows = load_rows(tmp_path / "data" / "test.jsonl")
    right, wrong, unboxed = test_rows[:3]
    positive = {r.id: next(c["title"] for c in r.candidates if c["id"] == r.ground_truth_ids[0]) for r in test_rows}
    negative = {r.id: next(c["title"] for c in r.candidates if c["id"] != r.ground_truth_ids[0]) for r in test_rows}
    answers = {
        right.id: f"{negative[right.id]} is tempting.\n\\boxed{{{positive[right.id]}}}",
        wrong.id: f"{positive[wrong.id]} fits, but \\boxed{{{negative[wrong.id]}}}",  # named the truth, picked wrong
        unboxed.id: positive[unboxed.id],  # no box: no pick
    }
    predictions = tmp_path / "answers.jsonl"
    predictions.write_text("".join(json.dumps({"id": i, "completion": t}) + "\n" for i, t in answers.items()))
    variant = json.loads((tmp_path / "data" / "stats.json").read_text())["prompt"]
    report = score_files(tmp_path / "data" / "test.jsonl", predictions, None, top_k=1, variant=variant)
    per_query = {entry["id"]: entry for entry in report["per_query"]}
    assert report["k"] == 1
    assert [per_query[r.id]["precision_at_k"] for r in (right, wrong, unboxed)] == [1.0, 0.0, 0.0]
    assert per_query[unboxed.id]["ftr"] == 1.0
    assert report["overall"]["ndcg_at_k"] == pytest.approx(1 / 3)


def test_rerec_rewards_by_hand(tmp_path):
    prepare(tmp_path)
    benchmark, resources = rft_resources(tmp_path / "train_rft.jsonl")
    assert benchmark.name == "recbench+" and resources.top_k == 1
    example = read_view(tmp_path / "train_rft.jsonl")[0]
    items = resources.matcher().items
    truth = example["ground_truth_ids"][0]
    other = next(i for i in example["candidate_ids"] if i != truth)
    texts = [
        f"\\boxed{{{items[truth].title}}}",
        f"{items[truth].title} is right but \\boxed{{{items[other].title}}}",
        items[truth].title,  # unboxed
    ]
    labels = {key: [example[key]] * 3 for key in ("ground_truth", "ground_truth_ids", "task", "conditions")}
    assert ndcg_at_k(texts, resources=resources, candidate_ids=[example["candidate_ids"]] * 3, **labels) == [1, 0, 0]
    assert boxed_format(texts + ["\\boxed{a} \\boxed{b}", "\\boxed{a} and more"]) == [0.5, 0.5, -0.5, -0.5, -0.5]
    aligned = item_alignment(texts, resources=resources, **labels)
    assert aligned[0] == pytest.approx(1.0) and aligned[2] == 0.0 and -1.0 <= aligned[1] < 1.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rerec", "--k", "5"], "--rerec sets its own candidates and K: leave out --k"),
        (["--rerec", "--candidates", "5"], "--rerec sets its own candidates and K: leave out --candidates"),
        (["--rerec"], "--rerec draws 19 negatives per query: the catalog has 14 items"),
        (["--rerec", "--rerec-negatives", "0"], "--rerec-negatives 0: give at least 1"),
    ],
)
def test_bad_rerec_flags(tmp_path, flags, message):
    result = run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", tmp_path / "out", *flags, check=False
    )
    assert result.returncode != 0 and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_misled_lines_need_candidates():
    benchmark = get_benchmark("recbench+")
    assert benchmark.misled_lines("Heat", {"ground_truth_ids": ["1"]}, Resources.loaded()) is None


def test_baselines_answer_in_the_protocols_form(tmp_path):
    prepare(tmp_path / "data")
    out = tmp_path / "bm25"
    run_script("evaluate/run.py", "--model", "baseline:bm25", "--data", tmp_path / "data" / "test.jsonl", "--out", out,
               "--no-wandb")  # fmt: skip
    rows = load_rows(tmp_path / "data" / "test.jsonl")
    answers = {json.loads(line)["id"]: json.loads(line)["completion"] for line in (out / "predictions.jsonl").open()}
    for row in rows:  # the retriever's favourite among the shown candidates, boxed
        best = min(row.candidates, key=lambda c: c["rank"])
        assert answers[row.id] == f"\\boxed{{{best['title']}}}"
    report = json.loads((out / "report.json").read_text())
    hits = sum(min(r.candidates, key=lambda c: c["rank"])["id"] == r.ground_truth_ids[0] for r in rows)
    assert report["overall"]["precision_at_k"] == pytest.approx(hits / len(rows)) and report["overall"]["ftr"] == 0.0
