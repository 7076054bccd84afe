"""RFT label columns are checked for the shapes the rewards read before training starts: a stranger's
``train_rft.jsonl`` with a title list written as one string, or a rank of ``{}``, was a TypeError in a reward
after the model had loaded and sampled its first completions."""

import json

import pytest
from conftest import ROOT

from rectune.benchmarks import get_benchmark, load_rows
from rectune.benchmarks.llmrec.rows import LLMRecRow
from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.core.io import DataError, RecTuneError
from rectune.training.views import check_examples

RECBENCH = get_benchmark("recbench+").labels([RecBenchRow.from_dict({
    "id": "movie/explicit/0", "domain": "movie", "task": "explicit", "query": "A heist film?",
    "ground_truth": ["Heat (1995)"], "ground_truth_ids": ["1"], "conditions": [["genre", "crime"]],
    "candidates": [{"id": "1", "title": "Heat (1995)", "rank": 2}, {"id": "2", "title": "Ronin (1998)", "rank": 1}],
})])[0]  # fmt: skip
PERREC_ROWS = load_rows(ROOT / "tests/fixtures/prepared_v2/perrec/train.jsonl")
PERREC = dict(zip([r.task for r in PERREC_ROWS], get_benchmark("perrecbench").labels(PERREC_ROWS), strict=True))
LLMREC = get_benchmark("llmrec").labels([LLMRecRow.from_dict({
    "id": "rating/u", "benchmark": "llmrec", "domain": "beauty", "task": "rating", "user": "u", "history": [],
    "item": {"id": "I0", "title": "Lip Balm"}, "target": "4.0",
})])[0]  # fmt: skip

CASES = [
    ("recbench+", RECBENCH | {"ground_truth": "Heat (1995)"}, "field 'ground_truth': must be a list of strings"),
    ("recbench+", RECBENCH | {"conditions": [["genre"]]}, "field 'conditions': must be a list of [relation, value]"),
    ("recbench+", RECBENCH | {"candidate_ranks": [2, {}]}, "field 'candidate_ranks': must be a list of finite numbers"),
    ("recbench+", RECBENCH | {"candidate_ranks": [2]}, "field 'candidate_ranks': 1 ranks for 2 candidate_ids"),
    ("recbench+", RECBENCH | {"task": "ranking"}, "field 'task': must be one of explicit, implicit, misinformed"),
    ("perrecbench", PERREC["pairwise"] | {"relative": [1.0, "x"]}, "field 'relative': must be a list of finite"),
    (
        "perrecbench",
        PERREC["pairwise"] | {"labels": ["A"], "relative": [1.0], "means": [3.0]},
        "field 'labels': a pairwise example needs 2 users' labels, relative ratings and means (got 1, 1 and 1)",
    ),
    ("perrecbench", PERREC["pointwise"] | {"position": 7}, "field 'position': must name one of the group's"),
    ("perrecbench", PERREC["pointwise"] | {"position": True}, "field 'position': must be an integer"),
    ("llmrec", LLMREC | {"target": "five"}, "field 'target': a rating example needs a finite number, got 'five'"),
    ("llmrec", LLMREC | {"candidate_ids": [["I1"]]}, "field 'candidate_ids': must be a list of strings"),
    ("llmrec", {k: v for k, v in LLMREC.items() if k != "item_id"}, "field 'item_id': missing (needed by the rewards)"),
]


@pytest.mark.parametrize(("benchmark", "labels", "message"), CASES, ids=[c[2][:40] for c in CASES])
def test_each_bad_label_is_named(benchmark, labels, message):
    checked = get_benchmark(benchmark)
    assert message in checked.label_problem(labels)


def test_the_labels_each_benchmark_writes_pass():
    assert get_benchmark("recbench+").label_problem(RECBENCH) is None
    assert RECBENCH["candidate_ranks"] == [2, 1]
    assert {task: get_benchmark("perrecbench").label_problem(labels) for task, labels in PERREC.items()} == {
        task: None for task in ("pointwise", "pairwise", "listwise")
    }
    assert get_benchmark("llmrec").label_problem(LLMREC) is None


def test_a_prepared_rft_file_is_refused_at_its_line(tmp_path):
    path = tmp_path / "train_rft.jsonl"
    good = {"prompt": [{"role": "user", "content": "A heist film?"}], "benchmark": "recbench+", **RECBENCH}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good | {"ground_truth_ids": [1]}) + "\n")
    with pytest.raises(DataError, match=r"train_rft.jsonl:2: field 'ground_truth_ids': must be a list of strings"):
        check_examples(path, "rft")
    path.write_text(json.dumps(good | {"benchmark": {"name": "recbench+"}}) + "\n")
    with pytest.raises(DataError, match=r"train_rft.jsonl:1: field 'benchmark': unknown benchmark \{'name'"):
        check_examples(path, "rft")


def test_perrec_rows_without_their_groups_listwise_row_are_one_line():
    """A split's pointwise rows picked out by hand: the group's order comes from its listwise row (a KeyError)."""
    pointwise = [row for row in PERREC_ROWS if row.task == "pointwise"]
    with pytest.raises(RecTuneError, match=rf"group '{pointwise[0].group}' has no listwise row among these rows"):
        get_benchmark("perrecbench").labels(pointwise)
