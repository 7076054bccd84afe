"""Interruptions and refusals: runs killed at chosen points (``RECTUNE_FAULT``, a SIGKILL the process
sends itself, as an OOM kill or a power cut would) leave a consistent state on disk, and reruns
recover; folders RecTune did not write are never deleted.
"""

import hashlib
import json
import signal

from conftest import RELEASE, read_jsonl, read_view, run_script, write_recipe

from rectune.core.locks import output_lock
from rectune.core.outputs import check_output_folder

KILLED = -signal.SIGKILL
LORA = {"use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"]}


def snapshot(folder):
    """Path -> SHA-256 of every file under ``folder``, hidden ones included."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def prepare(out, *flags, fault=None):
    return run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, *flags, fault=fault, check=False
    )


# --- data_prep: a whole set or nothing ------------------------------------------------------


def test_a_rebuild_killed_midway_leaves_the_earlier_set_whole(tmp_path):
    out = tmp_path / "data"
    assert prepare(out, "--test-size", "0.2").returncode == 0
    before = snapshot(out)
    killed = prepare(out, "--test-size", "0.5", "--seed", "7", fault="wrote:train.jsonl")
    assert killed.returncode == KILLED
    assert snapshot(out) == before  # not the new train.jsonl beside the old test.jsonl
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".data.staging-")]  # the dead run's staging

    assert prepare(out, "--test-size", "0.5", "--seed", "7").returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # the stale staging folder was cleaned up
    train = {json_row["messages"][-2]["content"] for json_row in read_view(out / "train_sft.jsonl")}
    test_queries = [row["query"] for row in read_jsonl(out / "test.jsonl")]
    assert not any(any(query in prompt for prompt in train) for query in test_queries)


def test_a_run_killed_between_the_two_renames_gets_the_old_set_back(tmp_path):
    out = tmp_path / "data"
    assert prepare(out).returncode == 0
    before = snapshot(out)
    assert prepare(out, "--seed", "7", fault="swapped-out:data").returncode == KILLED
    assert not out.exists()  # moved aside, the new one not yet in place
    with output_lock(out):  # what any later run does first
        check_output_folder(out, "recbench+ data", overwrite=False)
    assert snapshot(out) == before  # the earlier set is back, whole
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_out_holding_other_files_is_refused(tmp_path):
    out = tmp_path / "mine"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "important.bin").write_bytes(b"\x00" * 10)
    (out / "notes.md").write_text("my notes")
    result = prepare(out)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "holds files RecTune did not write there" in result.stderr
    assert "notes.md" in result.stderr and "--overwrite" in result.stderr
    assert (out / "notes.md").read_text() == "my notes" and (out / "runs" / "important.bin").is_file()
    assert prepare(out, "--overwrite").returncode == 0
    assert (out / "test.jsonl").is_file() and not (out / "notes.md").exists()


def test_a_previous_output_is_replaced_but_one_with_additions_is_refused(tmp_path):
    out = tmp_path / "data"
    assert prepare(out).returncode == 0
    assert prepare(out, "--seed", "3").returncode == 0  # ours: replaced without asking
    (out / "my_analysis.ipynb").write_text("{}")
    result = prepare(out, "--seed", "4")
    assert result.returncode == 2 and "my_analysis.ipynb" in result.stderr


def test_out_naming_a_file_is_refused(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("keep")
    result = prepare(target)
    assert result.returncode == 2 and "is a file" in result.stderr and "Traceback" not in result.stderr
    assert target.read_text() == "keep"


# --- merge ----------------------------------------------------------------------------------


def test_merge_never_deletes_a_folder_it_did_not_write(tmp_path, adapters):
    out = tmp_path / "merged"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "important.bin").write_bytes(b"1")
    (out / "notes.md").write_text("notes")
    result = run_script("train/merge.py", "--adapters", *adapters, "--out", out, check=False)
    assert result.returncode == 2 and "holds files RecTune did not write there" in result.stderr
    assert (out / "notes.md").read_text() == "notes" and (out / "runs" / "important.bin").read_bytes() == b"1"


def test_merge_killed_before_its_swap_keeps_the_earlier_merge(tmp_path, adapters):
    out = tmp_path / "merged"
    run_script("train/merge.py", "--adapters", *adapters, "--out", out)
    before = snapshot(out)
    killed = run_script(
        "train/merge.py", "--adapters", *adapters, "--out", out, "--weights", "1", "0", "0", fault="swap:merged",
        check=False,
    )  # fmt: skip
    assert killed.returncode == KILLED
    assert snapshot(out) == before
    run_script("train/merge.py", "--adapters", *adapters, "--out", out, "--weights", "1", "0", "0")
    assert snapshot(out) != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged"]


def test_merge_weights_must_be_finite(tmp_path, adapters):
    for weights in (["nan", "0.5", "0.5"], ["inf", "0", "0"]):
        result = run_script(
            "train/merge.py", "--adapters", *adapters, "--out", tmp_path / "m", "--weights", *weights, check=False
        )
        assert result.returncode == 2 and "finite" in result.stderr
    assert not (tmp_path / "m").exists()


# --- evaluation -----------------------------------------------------------------------------


def evaluate(model, data, out, *flags, fault=None):
    return run_script(
        "evaluate/run.py", "--model", model, "--data", data / "test.jsonl", "--out", out, "--limit", "6",
        "--batch-size", "2", "--max-new-tokens", "4", "--no-wandb", *flags, fault=fault, check=False,
    )  # fmt: skip


def test_eval_killed_after_a_batch_resumes_with_every_good_line(tmp_path, tiny_model, movie_data):
    out = tmp_path / "report"
    assert evaluate(tiny_model, movie_data, out, fault="eval:batch").returncode == KILLED
    first = read_jsonl(out / "predictions.jsonl")
    assert len(first) == 2 and not (out / "report.json").exists()

    # damage in the middle of the file: the good lines around it are kept, the damaged one redone
    lines = (out / "predictions.jsonl").read_text().splitlines(keepends=True)
    (out / "predictions.jsonl").write_text(lines[0] + '{"id": "movie/expl\n' + lines[1])
    result = evaluate(tiny_model, movie_data, out)
    assert result.returncode == 0, result.stderr
    assert "skipped 1 damaged line(s) (line 2)" in result.stderr
    final = read_jsonl(out / "predictions.jsonl")
    assert final[:2] == first and len(final) == 6 == len({row["id"] for row in final})


def test_eval_refuses_predictions_made_by_other_settings(tmp_path, tiny_model, movie_data):
    out = tmp_path / "report"
    assert evaluate(tiny_model, movie_data, out).returncode == 0
    predictions = (out / "predictions.jsonl").read_bytes()
    result = evaluate(tiny_model, movie_data, out, "--do-sample")
    assert result.returncode == 2 and "different generation" in result.stderr and "--overwrite" in result.stderr
    assert (out / "predictions.jsonl").read_bytes() == predictions
    assert evaluate(tiny_model, movie_data, out, "--do-sample", "--overwrite").returncode == 0


# --- training -------------------------------------------------------------------------------


def sft_recipe(tmp_path, model, data, out, **extra):
    values = {
        "model_name_or_path": str(model), **LORA,
        "datasets": [{"path": "json", "data_files": str(data / "train_sft.jsonl")}],
        "output_dir": str(out), "max_steps": 3, "per_device_train_batch_size": 3, "learning_rate": 3e-3,
        "save_steps": 1, "report_to": ["none"], "max_length": 256, "seed": 0, **extra,
    }  # fmt: skip
    return write_recipe(tmp_path / "sft.yaml", **values)


def test_training_skips_a_checkpoint_cut_while_saving(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path, tiny_model, train_data, out)
    assert run_script("train/sft.py", recipe, fault="saved:checkpoint-2", check=False).returncode == KILLED
    card = (out / "README.md").read_text()  # a stopped stage's card is RecTune's, saying it is unfinished
    assert "**Still training**" in card and f"base_model: {tiny_model}" in card and "None" not in card
    # What a kill during the save leaves: the weights half written and no trainer_state.json (written last).
    (out / "checkpoint-2" / "trainer_state.json").unlink()
    (out / "checkpoint-2" / "adapter_model.safetensors").write_bytes(b"cut")
    result = run_script("train/sft.py", recipe, check=False)
    assert result.returncode == 0, result.stderr
    assert "skipping" in result.stderr and "checkpoint-2: no trainer_state.json" in result.stderr
    assert f"resuming from {out / 'checkpoint-1'}" in result.stderr
    assert (out / "finished.json").is_file() and (out / "checkpoint-3" / "trainer_state.json").is_file()


def test_a_finished_stage_is_final(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path, tiny_model, train_data, out)
    run_script("train/sft.py", recipe)
    before = snapshot(out)
    result = run_script("train/sft.py", recipe)  # as `make rft-after-sft` reruns it as a dependency
    assert "finished at step 3; nothing to do" in result.stdout
    assert snapshot(out) == before
    assert not (out / "checkpoint-4").exists()


def test_a_run_killed_during_its_final_save_trains_no_step_more(tmp_path, tiny_model, train_data):
    from safetensors.torch import load_file

    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path, tiny_model, train_data, out)
    flags = ("--max_steps", "1", "--save_steps", "1")
    assert run_script("train/sft.py", recipe, *flags, fault="saved:checkpoint-1", check=False).returncode == KILLED
    result = run_script("train/sft.py", recipe, *flags)
    assert "holds the last step: loading it, nothing left to train" in result.stderr
    assert json.loads((out / "finished.json").read_text())["global_step"] == 1
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    saved = load_file(out / "adapter_model.safetensors")
    checkpoint = load_file(out / "checkpoint-1" / "adapter_model.safetensors")
    assert saved.keys() == checkpoint.keys() and all(saved[k].equal(checkpoint[k]) for k in saved)
