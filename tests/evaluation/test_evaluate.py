"""evaluate/run.py and evaluate/compare.py end to end on the tiny model, plus resume and checkpoint kinds."""

import contextlib
import csv
import glob
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    GEMMA2_TEMPLATE,
    model_asking_for,
    model_with_template,
    read_jsonl,
    run_script,
    wandb_run,
    write_recipe,
)

from rectune.benchmarks import load_rows
from rectune.benchmarks.recbench.prompts import build_messages
from rectune.core.io import DataError
from rectune.data.prompt_options import prompt_variant
from rectune.evaluation.predictions import answers_at_token_limit, run_generation
from rectune.evaluation.reports import token_limit_text
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint
from rectune.models.generation import GenerationSettings, generate, time_left_bound


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory, tiny_model, train_data) -> Path:
    out = tmp_path_factory.mktemp("run") / "sft"
    recipe = write_recipe(
        out.parent / "r.yaml",
        model_name_or_path=str(tiny_model),
        use_peft=True,
        lora_r=4,
        lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"],
        output_dir=str(out),
        max_steps=2,
        report_to=["none"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
        max_length=256,
    )
    run_script("train/sft.py", recipe)
    return out


def test_checkpoint_kinds(tmp_path, tiny_model, tiny_adapter, monkeypatch):
    assert resolve_checkpoint(str(tiny_model)).kind == "model"
    adapter = resolve_checkpoint(str(tiny_adapter))
    assert (adapter.kind, adapter.base_model, adapter.adapter) == ("adapter", str(tiny_model), str(tiny_adapter))
    asked = []  # whether a hub id is cached or reachable is tests/models/test_hub_models.py's question
    monkeypatch.setattr("rectune.models.checkpoints.check_model_available", asked.append)
    assert resolve_checkpoint("Qwen/Qwen2.5-3B-Instruct").kind == "model"  # a hub id
    assert asked == ["Qwen/Qwen2.5-3B-Instruct"]
    run = tmp_path / "outputs" / "myrun"
    shutil.copytree(tiny_adapter, run / "sft", ignore=shutil.ignore_patterns("checkpoint-*"))
    time.sleep(0.01)
    shutil.copytree(tiny_adapter, run / "sft_rft", ignore=shutil.ignore_patterns("checkpoint-*"))
    os.utime(run / "sft_rft" / "adapter_config.json")
    picked = resolve_checkpoint(str(run))
    assert (picked.kind, picked.adapter) == ("run", str(run / "sft_rft"))  # trained last
    assert resolve_checkpoint(str(run), stage="sft").adapter == str(run / "sft")
    with pytest.raises(DataError, match="has no stage 'rft'"):
        resolve_checkpoint(str(run), stage="rft")
    with pytest.raises(DataError, match="checkpoint not found"):
        resolve_checkpoint(str(tmp_path / "missing"))
    with pytest.raises(DataError, match="not a model folder"):
        resolve_checkpoint(str(tmp_path))
    going = tmp_path / "going"  # a run still training: checkpoints only, its adapter written as it finishes
    for step in (2, 10):
        shutil.copytree(tiny_adapter, going / f"checkpoint-{step}", ignore=shutil.ignore_patterns("checkpoint-*"))
    with pytest.raises(DataError) as caught:
        resolve_checkpoint(str(going))
    assert str(caught.value) == (
        f"{going}: a training run that has not finished: evaluate a checkpoint (checkpoint-10 is the newest)"
    )
    going.rename(run / "rft")  # a run folder whose RFT stage is training
    with pytest.raises(DataError, match=r"rft: a training run that has not finished: .*\(checkpoint-10 is the newest"):
        resolve_checkpoint(str(run), stage="rft")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/nowhere/model"}))
    with pytest.raises(DataError, match="base model /nowhere/model does not exist"):
        resolve_checkpoint(str(broken))


def test_batched_generation_matches_one_at_a_time(tiny_model, movie_data):
    """Left padding and length sorting must not change greedy outputs.

    In fp32: in bf16 (the GPU default) a random model's near-tied logits can flip with the batch shape.
    """
    model, tokenizer = load_for_generation(resolve_checkpoint(str(tiny_model)), dtype=torch.float32)
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")]
    settings = GenerationSettings(batch_size=4, max_new_tokens=8)
    batched = {i: answer for batch in generate(model, tokenizer, prompts, settings) for i, *answer in batch}
    alone = GenerationSettings(batch_size=1, max_new_tokens=8)
    single = {i: answer for batch in generate(model, tokenizer, prompts, alone) for i, *answer in batch}
    assert sorted(batched) == list(range(len(prompts)))
    assert batched == single


def answers_of(path, prompts, settings, *, no_end_token=False) -> dict:
    """{prompt index: (answer, finish reason)} of the checkpoint at ``path``, greedy in fp32."""
    model, tokenizer = load_for_generation(resolve_checkpoint(str(path)), dtype=torch.float32)
    if no_end_token:
        model.generation_config.eos_token_id = None
    return {i: (answer, end) for batch in generate(model, tokenizer, prompts, settings) for i, answer, end in batch}


def test_a_model_folders_beams_and_clock_are_ignored_one_answer_a_query(tmp_path, tiny_model, movie_data, caplog):
    """A checkpoint's generation_config.json asking for beam search, several sequences a prompt or a time limit
    would change what is measured (or return more answers than queries, a crash): evaluation answers each
    query once, greedily, and says what it ignored."""
    folder = model_asking_for(tmp_path / "beams", tiny_model, num_beams=4, num_return_sequences=4, max_time=1e-4)
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")][:3]
    settings = GenerationSettings(batch_size=3, max_new_tokens=6)
    plain = answers_of(tiny_model, prompts, settings)
    with caplog.at_level(logging.WARNING, logger="rectune.models.checkpoints"):
        assert answers_of(folder, prompts, settings) == plain
    assert caplog.messages == [
        f"{folder}: its generation_config.json asks for max_time 0.0001, num_beams 4, num_return_sequences 4; "
        "ignored: one answer a query"
    ]


def test_a_model_folders_values_generate_would_raise_on_are_ignored(tmp_path, tiny_model, movie_data, caplog):
    """A repetition penalty of 0 or an end token that is no id raised at the first batch: a traceback."""
    folder = model_asking_for(tmp_path / "odd", tiny_model, repetition_penalty=0, eos_token_id="abc")
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")][:2]
    settings = GenerationSettings(batch_size=2, max_new_tokens=4)
    plain = answers_of(tiny_model, prompts, settings, no_end_token=True)  # as the folder's, whose end token went
    with caplog.at_level(logging.WARNING, logger="rectune.models.checkpoints"):
        assert answers_of(folder, prompts, settings, no_end_token=True) == plain
    assert caplog.messages == [
        f"{folder}: its generation_config.json asks for eos_token_id 'abc' (no value generate takes), "
        "repetition_penalty 0 (no value generate takes); ignored: one answer a query"
    ]


def test_a_tokenizer_naming_no_padding_or_end_token_still_batches(tmp_path, tiny_model, movie_data):
    """Padding a batch raised ("Asking to pad but the tokenizer does not have a padding token"): a traceback."""
    folder = tmp_path / "unnamed"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("pad_token"), config.pop("eos_token")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")][:3]
    settings = GenerationSettings(batch_size=3, max_new_tokens=4)
    # the padding is masked, whichever token it is
    assert answers_of(folder, prompts, settings) == answers_of(tiny_model, prompts, settings)


def test_a_model_whose_template_takes_no_system_message_is_scored_and_one_without_a_template_refused(
    tmp_path, tiny_model, movie_data
):
    """Gemma 2's template raises on a system message (it was a traceback): the system prompt opens the user's.
    A tokenizer without a chat template stops in one line, before the model loads."""
    gemma = model_with_template(tmp_path / "gemma", tiny_model, GEMMA2_TEMPLATE)
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "4", "--no-wandb")
    result = run_script("evaluate/run.py", "--model", gemma, "--out", tmp_path / "g", *args)
    assert f"{gemma}: its chat template takes no system message; the system prompt opens" in result.stderr
    assert "| overall | 9 |" in result.stdout
    base = model_with_template(tmp_path / "base", tiny_model, None)
    refused = run_script("evaluate/run.py", "--model", base, "--out", tmp_path / "b", *args, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: {base}: its tokenizer has no chat template (a base model?); give an instruction-tuned model"
    )
    assert not (tmp_path / "b").exists()


def test_each_answer_says_whether_it_ran_out_of_tokens(tiny_model, movie_data):
    """An answer that ends with an end token is ``stop``; one that used every new token is ``length``."""
    model, tokenizer = load_for_generation(resolve_checkpoint(str(tiny_model)), dtype=torch.float32)
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")][:2]
    settings = GenerationSettings(batch_size=2, max_new_tokens=4)
    model.generation_config.eos_token_id = None  # nothing ends an answer: all run to the limit
    ran_out = {i: reason for batch in generate(model, tokenizer, prompts, settings) for i, _, reason in batch}
    assert ran_out == {0: {"finish_reason": "length"}, 1: {"finish_reason": "length"}}
    # make the third token the first prompt's answer writes an end token: that answer stops there
    first = tokenizer.apply_chat_template(prompts[0], tokenize=False, add_generation_prompt=True)
    inputs = tokenizer(first, return_tensors="pt", add_special_tokens=False)
    written = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    third = int(written[0, inputs["input_ids"].shape[1] + 2])
    model.generation_config.eos_token_id = [third]
    ended = {i: reason for batch in generate(model, tokenizer, prompts, settings) for i, _, reason in batch}
    assert ended[0] == {"finish_reason": "stop"}


def test_progress_states_the_most_the_rest_can_take(tiny_model, movie_data, capsys):
    model, tokenizer = load_for_generation(resolve_checkpoint(str(tiny_model)), dtype=torch.float32)
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")]
    list(generate(model, tokenizer, prompts, GenerationSettings(batch_size=4, max_new_tokens=8)))
    err = capsys.readouterr().err
    assert re.search(r"at most \d\d:\d\d left at 8 tokens an answer", err)
    assert not re.search(r"generating:[^\r\n]*\d\d:\d\d<", err)  # no tqdm ETA ("00:01<00:02") beside it


def test_time_left_bound_by_hand():
    # 0.5 s a decoding step, 20 queries left in batches of 8: 3 batches of up to 256 steps = 384 s
    assert time_left_bound(0.5, 20, GenerationSettings(batch_size=8, max_new_tokens=256)) == 384.0
    assert time_left_bound(0.5, 0, GenerationSettings()) == 0.0


def test_default_answer_length_is_the_benchmarks(tmp_path, tiny_model, movie_data):
    out = tmp_path / "report"
    run_script("evaluate/run.py", "--model", tiny_model, "--data", movie_data / "test.jsonl", "--out", out,
               "--limit", "2", "--no-wandb")  # fmt: skip
    assert json.loads((out / "config.json").read_text())["generation"]["max_new_tokens"] == 160  # RecBench+


def test_resume_after_an_interruption(tmp_path, movie_data):
    rows = load_rows(movie_data / "test.jsonl")
    path = tmp_path / "predictions.jsonl"
    asked: list[str] = []

    def interrupted(prompts):
        for start in range(0, len(prompts), 2):
            if start == 4:
                raise KeyboardInterrupt
            asked.extend(p[1]["content"] for p in prompts[start : start + 2])
            yield [(i, f"answer {i}") for i in range(start, min(start + 2, len(prompts)))]

    with pytest.raises(KeyboardInterrupt):
        run_generation(rows, path, interrupted, {"with_history": False, "k": None})
    done = read_jsonl(path)
    assert len(done) == 4
    with path.open("a") as handle:
        handle.write('{"id": "movie/implicit/1", "compl')  # a line cut mid-write

    asked.clear()

    def complete(prompts):
        asked.extend(p[1]["content"] for p in prompts)
        yield [(i, "later") for i in range(len(prompts))]

    final = run_generation(rows, path, complete, {"with_history": False, "k": None})
    assert len(asked) == len(rows) - 4  # only the missing queries were generated
    lines = read_jsonl(path)
    assert sorted(r["id"] for r in lines) == sorted(r.id for r in rows)  # no duplicate, none lost
    assert lines[:4] == done  # finished rows untouched
    assert final == {r["id"]: r["completion"] for r in lines}


def test_a_row_cut_just_before_its_newline_is_redone(tmp_path, movie_data):
    rows = load_rows(movie_data / "test.jsonl")
    path = tmp_path / "predictions.jsonl"
    path.write_text(
        json.dumps({"id": rows[0].id, "completion": "kept"})
        + "\n"
        + json.dumps({"id": rows[1].id, "completion": "cut"})
    )  # complete JSON, newline never written

    def generate_rest(prompts):
        yield [(i, "redone") for i in range(len(prompts))]

    final = run_generation(rows, path, generate_rest, {"with_history": False, "k": None})
    assert final[rows[0].id] == "kept" and final[rows[1].id] == "redone"
    assert sorted(r["id"] for r in read_jsonl(path)) == sorted(r.id for r in rows)


def test_answers_at_the_token_limit_are_counted_where_recorded(tmp_path):
    path = tmp_path / "predictions.jsonl"
    lines = [
        {"id": "a", "completion": "Heat (1995) [SEP] Rocky (19", "finish_reason": "length"},
        {"id": "b", "completion": "Heat (1995)", "finish_reason": "stop"},
        {"id": "c", "completion": "not asked for here", "finish_reason": "length"},
        {"id": "d", "completion": "no reason recorded"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"id": "a", "compl')
    assert answers_at_token_limit(path, {"a", "b", "d"}) == 1
    assert answers_at_token_limit(path, {"b"}) == 0
    assert answers_at_token_limit(path, {"d"}) is None  # a baseline's or an answer file's: not known
    assert token_limit_text(None, 4, 96) is None and token_limit_text(0, 4, 96) is None
    assert token_limit_text(3, 4, 96) == (
        "3 of 4 answers used all 96 new tokens and may be cut short: scores count what was written, so raise "
        "--max-new-tokens"
    )


def test_predictions_for_other_data_are_refused(tmp_path, movie_data):
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"id": "book/explicit/0", "completion": "x"}\n')
    with pytest.raises(DataError, match="prediction for id 'book/explicit/0': not in this data"):
        run_generation(load_rows(movie_data / "test.jsonl"), path, None, {"with_history": False, "k": None})


def test_prompt_variant_follows_data_prep(tmp_path, movie_data):
    recorded = prompt_variant(movie_data / "test.jsonl", None, None)
    assert recorded == {
        "with_history": False, "k": None, "candidates": None, "candidate_facts": False, "candidate_order": None,
    }  # fmt: skip
    (tmp_path / "stats.json").write_text(json.dumps({"prompt": {"with_history": True, "k": 5}}))
    assert prompt_variant(tmp_path / "test.jsonl", None, None) == {"with_history": True, "k": 5}
    assert prompt_variant(tmp_path / "test.jsonl", False, None) == {"with_history": False, "k": 5}


def test_run_end_to_end_with_wandb_offline(tmp_path, tiny_adapter, movie_data):
    out = tmp_path / "reports" / "tiny_sft"
    result = run_script(
        "evaluate/run.py",
        "--model",
        tiny_adapter,
        "--data",
        movie_data / "test.jsonl",
        "--out",
        out,
        "--max-new-tokens",
        "6",
        "--batch-size",
        "4",
    )
    assert "| overall | 9 |" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["n"] == 9 and set(report["by_task"]) == {
        "explicit",
        "implicit",
        "misinformed",
        "interest",
        "demographics",
    }
    assert report["config"]["kind"] == "adapter" and report["config"]["prompt"] == {
        "with_history": False,
        "k": None,
        "candidates": None,
        "candidate_facts": False,
        "candidate_order": None,
    }
    predictions = read_jsonl(out / "predictions.jsonl")
    assert len(predictions) == 9
    assert (out / "report.md").read_text().startswith("# tiny_sft")
    # each answer records how it ended; those that used all 6 tokens are counted, and named if any
    assert {p["finish_reason"] for p in predictions} <= {"stop", "length"}
    cut = sum(p["finish_reason"] == "length" for p in predictions)
    assert report["completions"]["cut_at_max_new_tokens"] == cut
    warned = f"{cut} of 9 answers used all 6 new tokens and may be cut short"
    assert (warned in (out / "report.md").read_text()) == (warned in result.stderr) == (cut > 0)
    (run_file,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = wandb_run(run_file)
    assert logged["summary"]["explicit/recall"] == report["by_task"]["explicit"]["recall"]
    assert logged["summary"]["overall/precision"] == report["overall"]["precision"]
    assert logged["summary"]["overall/n"] == 9 and logged["summary"]["per_query/nrows"] == 9
    assert logged["config"]["checkpoint"] == str(tiny_adapter) and logged["config"]["queries"] == 9

    # a rerun resumes: nothing left to generate, same report
    again = run_script(
        "evaluate/run.py",
        "--model",
        tiny_adapter,
        "--data",
        movie_data / "test.jsonl",
        "--out",
        out,
        "--max-new-tokens",
        "6",
        "--no-wandb",
    )
    assert "resuming: 9 of 9 queries already done" in again.stderr
    assert json.loads((out / "report.json").read_text())["overall"] == report["overall"]


def test_bad_inputs(tmp_path, tiny_model, movie_data):
    empty = tmp_path / "test.jsonl"
    empty.write_text("")
    result = run_script(
        "evaluate/run.py", "--model", tiny_model, "--data", empty, "--out", tmp_path / "r", "--no-wandb", check=False
    )
    assert result.returncode != 0 and "test.jsonl: file is empty" in result.stderr
    assert not (tmp_path / "r").exists()
    result = run_script(
        "evaluate/run.py",
        "--model",
        tmp_path / "nope",
        "--data",
        movie_data / "test.jsonl",
        "--out",
        tmp_path / "r",
        "--no-wandb",
        check=False,
    )
    assert "nope: checkpoint not found" in result.stderr


def write_report(folder: Path, recall: float) -> Path:
    folder.mkdir(parents=True)
    summary = {"n": 2, "precision": 0.5, "recall": recall, "cmr": None, "ftr": 0.0}
    (folder / "report.json").write_text(json.dumps({"overall": summary, "by_task": {"interest": summary}}))
    return folder


def test_compare(tmp_path):
    a = write_report(tmp_path / "reports" / "base", 0.1)
    b = write_report(tmp_path / "reports" / "sft", 0.4)
    prefix = tmp_path / "reports" / "comparison"
    result = run_script("evaluate/compare.py", a, b, "--out", prefix)
    assert "| interest | sft | 2 | 0.500 | 0.400 | - | 0.000 |" in result.stdout
    rows = list(csv.DictReader(prefix.with_suffix(".csv").read_text().splitlines()))
    assert [(r["task"], r["checkpoint"], r["recall"]) for r in rows] == [
        ("interest", "base", "0.1"),
        ("interest", "sft", "0.4"),
        ("overall", "base", "0.1"),
        ("overall", "sft", "0.4"),
    ]
    assert prefix.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    # `reports/*` includes the outputs of an earlier comparison: they are skipped
    again = run_script("evaluate/compare.py", *sorted(glob.glob(str(tmp_path / "reports" / "*"))), "--out", prefix)
    assert again.stdout.count("| overall |") == 2
    result = run_script("evaluate/compare.py", tmp_path / "nothing", "--out", prefix, check=False)
    assert "no report here" in result.stderr
    # tables written into a report folder it reads replaced that report's own report.md, --overwrite or not
    for given in (b, b / "report.json"):
        result = run_script("evaluate/compare.py", a, given, "--out", b / "report", "--overwrite", check=False)
        assert result.returncode == 2 and result.stderr.splitlines()[-1].startswith(
            f"error: --out {b / 'report.md'}: lies in a report {b}, which this run reads"
        ), result.stderr[-400:]
    assert sorted(p.name for p in b.iterdir()) == ["report.json"]


@pytest.mark.integration  # wandb starts its own service process
def test_wandb_logging_records_every_task_and_metric(tmp_path):
    """log_to_wandb on a hand-made report whose every value differs, read back from the offline run file."""
    import wandb

    from rectune.evaluation.tracking import log_to_wandb

    report = {
        "metrics": ["precision", "recall"],
        "by_task": {"explicit": {"n": 2, "precision": 0.25, "recall": 0.5}, "implicit": {"n": 1, "precision": 0.75,
                                                                                          "recall": None}},
        "overall": {"n": 3, "precision": 0.4, "recall": 0.6},
        "config": {"data": str(tmp_path / "movie" / "test.jsonl"), "checkpoint": "outputs/run/sft"},
    }  # fmt: skip
    table = [{"id": "q1", "recall": 0.5}, {"id": "q2", "recall": 0.0}, {"id": "q3", "recall": 1.0}]
    log_to_wandb(tmp_path / "out", report, table, "rectune-test")
    wandb.teardown()  # the service closes the run's file as the process would at exit; read it only then
    (run_file,) = glob.glob(str(tmp_path / "out" / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = wandb_run(run_file)
    summary = {k: v for k, v in logged["summary"].items() if k.split("/")[0] in ("explicit", "implicit", "overall")}
    assert summary == {
        "explicit/precision": 0.25, "explicit/recall": 0.5, "explicit/n": 2,
        "implicit/precision": 0.75, "implicit/n": 1,  # a metric without a value is left out, not logged as 0
        "overall/precision": 0.4, "overall/recall": 0.6, "overall/n": 3,
    }, logged  # fmt: skip
    assert logged["summary"]["per_query/nrows"] == 3 and logged["summary"]["per_query/ncols"] == 2
    assert logged["config"]["checkpoint"] == "outputs/run/sft"


@pytest.mark.integration  # wandb starts its own service process
def test_a_per_query_table_past_wandbs_logged_rows_keeps_every_row_in_an_artifact(tmp_path, monkeypatch, capsys):
    """W&B keeps a logged table's first 10,000 rows; 10,001 rows go whole into an artifact, here in parts of 4,000."""
    import wandb

    from rectune.evaluation.tracking import log_to_wandb

    monkeypatch.setattr(wandb.Table, "MAX_ARTIFACT_ROWS", 4000)  # an artifact's table keeps 200,000
    monkeypatch.setenv("WANDB_RUN_ID", "eval+1")  # a run id W&B takes, with a character no artifact name may hold
    report = {"metrics": ["recall"], "by_task": {"explicit": {"n": 10001, "recall": 0.5}},
              "overall": {"n": 10001, "recall": 0.5}, "config": {"data": str(tmp_path / "movie" / "test.jsonl"),
                                                                 "checkpoint": "outputs/run/sft"}}  # fmt: skip
    table = [{"id": f"q{i}", "recall": i % 2} for i in range(10001)]
    log_to_wandb(tmp_path / "out", report, table, "rectune-test")
    wandb.teardown()
    (run_file,) = glob.glob(str(tmp_path / "out" / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = wandb_run(run_file)
    assert "per_query/_type" not in logged["summary"]  # no table-file, cut to 10,000 rows, in the run itself
    assert logged["summary"]["per_query/nrows"] == 10001
    ((name, files),) = logged["artifacts"].items()
    assert name == "per_query-eval_1" and f"is the run's artifact {name}\n" in capsys.readouterr().out
    parts = [json.loads(Path(files[f"{part}.table.json"]).read_text())["data"]
             for part in ("per_query", "per_query-2", "per_query-3")]  # fmt: skip
    assert [len(rows) for rows in parts] == [4000, 4000, 2001] and len(files) == 3
    assert [row for rows in parts for row in rows] == [[f"q{i}", i % 2] for i in range(10001)]


def test_rows_that_finished_are_not_computed_and_the_answers_are_unchanged(tiny_model, movie_data, monkeypatch):
    model, tokenizer = load_for_generation(resolve_checkpoint(str(tiny_model)), dtype=torch.float32)
    prompts = [build_messages(r) for r in load_rows(movie_data / "test.jsonl")][:4]
    settings = GenerationSettings(batch_size=4, max_new_tokens=8)
    first = tokenizer.apply_chat_template(prompts[0], tokenize=False, add_generation_prompt=True)
    inputs = tokenizer(first, return_tensors="pt", add_special_tokens=False)
    written = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    model.generation_config.eos_token_id = [int(written[0, inputs["input_ids"].shape[1] + 2])]  # ends one answer early
    rows: list[int] = []
    hook = model.model.register_forward_pre_hook(lambda m, a, k: rows.append(k["input_ids"].shape[0]), with_kwargs=True)
    skipping = {i: answer for batch in generate(model, tokenizer, prompts, settings) for i, *answer in batch}
    computed = list(rows)
    rows.clear()
    monkeypatch.setattr(
        "rectune.models.finished_rows.skipping_finished_rows",
        lambda model, rows, options: contextlib.nullcontext(options),
    )
    every_row = {i: answer for batch in generate(model, tokenizer, prompts, settings) for i, *answer in batch}
    hook.remove()
    assert skipping == every_row
    assert {"finish_reason": "stop"} in [reason for _, reason in skipping.values()]
    assert rows == [4] * len(rows) and len(computed) == len(rows) and sum(computed) < sum(rows)
