"""evaluate/run.py --model baseline:NAME writes a report folder like a model's: resumable, keyed by
what it was fitted on, compared beside checkpoints with ceilings marked."""

import glob
import json

from conftest import read_jsonl, run_script, wandb_run
from test_grounding import prepare

from rectune.benchmarks import load_rows


def evaluate(data, out, *args, check=True):
    return run_script("evaluate/run.py", "--data", data / "test.jsonl", "--out", out, "--no-wandb", *args, check=check)


def test_bm25_report_is_the_retrievers_top_k_resumes_and_refuses_other_training_data(tmp_path):
    data = tmp_path / "data"
    prepare(data, "--candidates", "3", "--test-size", "0.5")
    out = tmp_path / "bm25"
    evaluate(data, out, "--model", "baseline:bm25", "--k", "2")
    rows = {row.id: row for row in load_rows(data / "test.jsonl")}
    for prediction in read_jsonl(out / "predictions.jsonl"):
        best = sorted(rows[prediction["id"]].candidates, key=lambda c: c["rank"])[:2]
        assert prediction["completion"] == " [SEP] ".join(c["title"] for c in best)
    report = json.loads((out / "report.json").read_text())
    assert report["k"] == 2 and report["overall"]["distinct"] == 2.0
    assert report["baseline"]["name"] == "bm25" and report["baseline"]["train"]["rows"] == len(
        load_rows(data / "train.jsonl")
    )
    assert report["config"]["kind"] == "baseline"
    details = read_jsonl(out / "details.jsonl")  # per query: answer, resolved titles and ground truth side by side
    assert [d["id"] for d in details] == list(rows) and {"completion", "resolved", "ground_truth"} <= set(details[0])
    by_id = {record["id"]: record for record in report["per_query"]}
    for detail in details:  # the headline @K scores beside each answer, as report.json has them
        for metric in ("ndcg_at_k", "precision_at_k", "recall_at_k", "repeated", "distinct"):
            assert detail[metric] == by_id[detail["id"]][metric]

    again = evaluate(data, out, "--model", "baseline:bm25", "--k", "2")
    assert f"resuming: {len(rows)} of {len(rows)} queries already done" in again.stderr

    with (data / "train.jsonl").open("a") as handle:  # other training data: another fitted model
        handle.write((data / "train.jsonl").read_text().splitlines()[0].replace('"id": "', '"id": "x') + "\n")
    refused = evaluate(data, out, "--model", "baseline:bm25", "--k", "2", check=False)
    assert refused.returncode == 2
    assert "made with a different model than this run" in refused.stderr.strip().splitlines()[-1]


def test_comparison_names_baselines_marks_the_ceiling_and_takes_a_baseline_as_reference(tmp_path):
    data = tmp_path / "data"
    prepare(data, "--candidates", "3", "--test-size", "0.5")
    for name in ("bm25", "popularity", "kg-oracle"):
        evaluate(data, tmp_path / "reports" / name, "--model", f"baseline:{name}")
    result = run_script(
        "evaluate/compare.py", *(tmp_path / "reports" / n for n in ("bm25", "popularity", "kg-oracle")),
        "--baseline", "baseline:bm25", "--out", tmp_path / "comparison",
    )  # fmt: skip
    table = result.stdout
    assert "| overall | baseline:bm25 |" in table
    assert "| explicit | baseline:kg-oracle (ceiling) |" in table
    assert "| overall | baseline:popularity | " in table and "[" in table.split("| overall | baseline:popularity")[1]
    # the ceiling answers condition-based queries only: no overall interval against bm25's every query
    ceiling_overall = table.split("| overall | baseline:kg-oracle (ceiling) |")[1].splitlines()[0]
    assert "[" not in ceiling_overall
    assert "P@5" in table.splitlines()[0]


def test_a_baseline_logs_to_wandb_with_what_it_was_fitted_on(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    data = tmp_path / "data"
    prepare(data, "--candidates", "3", "--test-size", "0.5")
    out = tmp_path / "oracle"
    run_script("evaluate/run.py", "--data", data / "test.jsonl", "--out", out, "--model", "baseline:kg-oracle")
    report = json.loads((out / "report.json").read_text())
    (run_file,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = wandb_run(run_file)
    assert logged["config"]["checkpoint"] == "baseline:kg-oracle"
    assert logged["config"]["baseline"]["ceiling"] is True
    assert logged["config"]["baseline"]["train"]["sha256"] == report["baseline"]["train"]["sha256"]
    assert logged["summary"]["overall/ndcg_at_k"] == report["overall"]["ndcg_at_k"]


def test_a_baseline_of_some_tasks_scores_the_queries_of_the_models_sample(tmp_path):
    """LLMRec: global-mean answers rating queries only; under --sample it scores the rating queries of the
    sample a model draws from all five tasks (2 of the 6), not a sample of its own."""
    from conftest import ROOT

    from rectune.evaluation.sampling import stratified_sample

    fixtures = ROOT / "tests" / "fixtures" / "amazon"
    data = tmp_path / "llmrec"
    run_script("data_prep/llmrec.py", "--reviews", fixtures / "reviews_2018.json", "--items",
               fixtures / "meta_2018.json", "--domain", "beauty", "--out", data, "--num-candidates", "4")  # fmt: skip
    rows = load_rows(data / "test.jsonl")
    assert len(rows) == 30  # 6 users x 5 tasks
    drawn = {r.id for r in stratified_sample(rows, 10, seed=0) if r.task == "rating"}
    evaluate(data, tmp_path / "mean", "--model", "baseline:global-mean", "--sample", "10")
    scored = {r["id"] for r in read_jsonl(tmp_path / "mean" / "predictions.jsonl")}
    assert len(drawn) == 2 and scored == drawn


def test_a_baseline_on_foreign_rows_stops_in_one_line(tmp_path):
    from conftest import ROOT
    from test_hostile import one_line

    data = tmp_path / "data"
    prepare(data, "--candidates", "3", "--test-size", "0.5")
    rows = read_jsonl(data / "test.jsonl")
    rows[0]["candidates"][0]["id"] = "99999"  # an id the catalog does not hold
    (data / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    for name in ("bm25", "popularity"):
        result = evaluate(data, tmp_path / name, "--model", f"baseline:{name}", check=False)
        one_line(result, f"row {rows[0]['id']!r}: candidate '99999' is not in the catalog")
    (data / "train.jsonl").write_bytes((ROOT / "tests/fixtures/prepared_v2/perrec/train.jsonl").read_bytes())
    result = evaluate(data, tmp_path / "other", "--model", "baseline:popularity", check=False)
    one_line(result, "train.jsonl: holds perrecbench rows, but --data is recbench+")


def test_a_baseline_with_no_validation_row_to_choose_on_says_where_rows_are_held_out(tmp_path):
    """Seven users at --valid-size 0.05 hold out none: valid.jsonl is written empty ("file is empty" said no more)."""
    from conftest import ROOT
    from test_hostile import one_line

    amazon, data = ROOT / "tests" / "fixtures" / "amazon", tmp_path / "data"
    run_script("data_prep/llmrec.py", "--reviews", amazon / "reviews_2018.json", "--items", amazon / "meta_2018.json",
               "--domain", "beauty", "--min-interactions", "2", "--out", data)  # fmt: skip
    assert (data / "valid.jsonl").stat().st_size == 0
    result = evaluate(data, tmp_path / "bias", "--model", "baseline:bias", check=False)
    one_line(result, f"{data / 'valid.jsonl'}: no rows baseline:bias answers: nothing to choose its hyper-parameters "
             "on (data_prep's --valid-size holds rows out here)")  # fmt: skip


def test_a_sample_is_recorded_where_its_scores_are(tmp_path):
    """--sample and its seed (the generation seed) reach config.json, report.json and report.md."""
    data = tmp_path / "data"
    prepare(data, "--candidates", "3", "--test-size", "0.5")
    out = tmp_path / "popularity"
    evaluate(data, out, "--model", "baseline:popularity", "--sample", "2", "--seed", "5")
    selection = {"tasks": None, "limit": None, "sample": 2, "sample_seed": 5}
    assert json.loads((out / "config.json").read_text())["selection"] == selection
    assert json.loads((out / "report.json").read_text())["config"]["selection"] == selection
    assert "(2 queries: a sample of 2 (seed 5))" in (out / "report.md").read_text()
