"""Ownership and locks: RecTune replaces only what its marker or manifest says it wrote, refuses
outputs that cannot be swapped in whole, and lets one process at a time own an output."""

import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import RELEASE, ROOT, can_mount_tmpfs, run_script, write_recipe

from rectune.core.io import UMASK
from rectune.core.locks import lock_path
from rectune.core.outputs import staged_folder

SHAREABLE = 0o666 & ~UMASK  # 0644 under the usual umask 022


def refused(result, *words):
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.splitlines()  # training logs a line or two before it gets to the output folder
    assert lines[-1].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[-1], result.stderr


def prepare(out, *flags, cwd=ROOT):
    return run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, *flags, check=False, cwd=cwd
    )


# --- ownership by marker only -----------------------------------------------------------------


def test_a_folder_without_the_marker_is_refused_whatever_its_files_are_called(tmp_path):
    out = tmp_path / "annotations"
    out.mkdir()
    (out / "annotations_2024.jsonl").write_text('{"mine": 1}\n')
    (out / "raw_reviews.jsonl").write_text('{"mine": 2}\n')
    refused(prepare(out), "annotations_2024.jsonl", "raw_reviews.jsonl", "--overwrite once")
    assert sorted(p.name for p in out.iterdir()) == ["annotations_2024.jsonl", "raw_reviews.jsonl"]

    release = tmp_path / "ml-1m"
    release.mkdir()
    (release / "movies.dat").write_text("1::Toy Story (1995)::Animation\n")
    (release / "ratings.dat").write_text("1::1::5::978300760\n")
    refused(run_script("data_prep/demo_world.py", "--out", release, check=False), "movies.dat")
    assert (release / "movies.dat").read_text() == "1::Toy Story (1995)::Animation\n"


@pytest.mark.parametrize(
    "marker",
    [{"kind": "recbench+ data", "entries": [{}], "files": {}}, {"kind": 3, "entries": []}, [], "1" * 5000],
    ids=["entries not names", "kind not a word", "a list", "a 5000-digit number"],
)
def test_a_marker_of_another_shape_vouches_for_nothing(tmp_path, marker):
    """A folder from elsewhere can carry a file named like the marker: one of another shape was a TypeError (an
    entry that is no name) or a ValueError (a number past Python's digit limit); it is now no marker at all."""
    from rectune.core.io import RecTuneError
    from rectune.core.outputs import MARKER, claim_output

    out = tmp_path / "shared"
    out.mkdir()
    (out / "notes.jsonl").write_text('{"mine": 1}\n')
    (out / MARKER).write_text(marker if isinstance(marker, str) else json.dumps(marker))
    with pytest.raises(RecTuneError, match=r"holds files RecTune did not write there \(notes.jsonl; no .rectune.json"):
        claim_output(out, "recbench+ data", overwrite=False)
    assert (out / "notes.jsonl").read_text() == '{"mine": 1}\n'


def test_merge_refuses_a_users_model_folder(tmp_path, adapters):
    model = tmp_path / "my-model"
    model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).write_text("{}")
    out = tmp_path / "merged"
    result = run_script("train/merge.py", "--adapters", *adapters, "--out", out, "--full-model", model, check=False)
    refused(result, "my-model", "config.json")
    assert not out.exists() and sorted(p.name for p in model.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json",
    ]  # fmt: skip


def test_merged_models_are_shareable(tmp_path, adapters):
    out, full = tmp_path / "merged", tmp_path / "full"
    run_script("train/merge.py", "--adapters", *adapters, "--out", out, "--full-model", full)
    files = [p for folder in (out, full) for p in folder.rglob("*") if p.is_file()]
    assert any(p.suffix == ".safetensors" for p in files)
    assert {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: SHAREABLE for p in files}


def test_staged_folders_are_swapped_in_shareable(tmp_path):
    """What the model cache and the merged SFT base are written through: private files become 0644."""
    with staged_folder(tmp_path / "cache", replace=True) as staging:
        weights = staging / "model.safetensors"
        weights.write_bytes(b"w")
        os.chmod(weights, 0o600)  # as safetensors creates it
    assert (tmp_path / "cache" / "model.safetensors").stat().st_mode & 0o777 == SHAREABLE


def test_score_never_replaces_a_file_it_did_not_write(tmp_path, movie_data):
    data = tmp_path / "data"
    shutil.copytree(movie_data, data)
    test_set = (data / "test.jsonl").read_bytes()
    predictions = tmp_path / "p.jsonl"
    rows = [json.loads(line) for line in test_set.decode().splitlines()]
    predictions.write_text("".join(json.dumps({"id": r["id"], "completion": "Heat"}) + "\n" for r in rows))
    score = ("evaluate/score.py", "--data", data / "test.jsonl", "--predictions", predictions)
    train_set = (data / "train.jsonl").read_bytes()
    refused(run_script(*score, "--out", data / "train.jsonl", check=False), "RecTune did not write it")
    assert (data / "train.jsonl").read_bytes() == train_set
    refused(run_script(*score, "--out", data / "test.jsonl", "--overwrite", check=False), "is --data")  # it reads
    assert (data / "test.jsonl").read_bytes() == test_set
    run_script(*score, "--out", tmp_path / "report.json")
    run_script(*score, "--out", tmp_path / "report.json")  # its own report: replaced
    (tmp_path / "report.json").write_text('{"edited": true}')
    refused(run_script(*score, "--out", tmp_path / "report.json", check=False), "or it changed since")
    run_script(*score, "--out", tmp_path / "report.json", "--overwrite")
    assert "overall" in json.loads((tmp_path / "report.json").read_text())


def test_compare_keeps_the_name_given_and_never_replaces_notes(tmp_path):
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "report.json").write_text(json.dumps({"overall": summary, "by_task": {}}))
    (tmp_path / "notes.md").write_text("my notes")
    compare = ("evaluate/compare.py", tmp_path / "base", "--out")
    refused(run_script(*compare, tmp_path / "notes", check=False), "notes.md")
    assert (tmp_path / "notes.md").read_text() == "my notes" and not (tmp_path / "notes.csv").exists()
    run_script(*compare, tmp_path / "run_v1.2")
    run_script(*compare, tmp_path / "run_v1.2")  # its own files: replaced
    assert {p.name for p in tmp_path.glob("run_v1*")} == {"run_v1.2.md", "run_v1.2.csv", "run_v1.2.png"}


def test_a_file_output_named_as_a_folder_is_refused(tmp_path):
    """``--out reports/cmp/`` wrote ``reports/cmp.md`` (pathlib drops the separator), ``score.py --out DIR/``
    a report named as the folder, ``--out ''`` or ``/`` was a ValueError, and an existing folder as compare's
    prefix put its three files beside it."""
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "report.json").write_text(json.dumps({"overall": summary, "by_task": {}}))
    for out in (f"{tmp_path}/cmp/", "", "/", "..", " "):
        result = run_script("evaluate/compare.py", tmp_path / "base", "--out", out, check=False, cwd=tmp_path)
        assert result.returncode == 2 and "argument --out: expected a file's name, got " in result.stderr, out
        result = run_script("evaluate/score.py", "--data", "d", "--predictions", "p", "--out", out, check=False)
        assert result.returncode == 2 and "argument --out: expected a file's name, got " in result.stderr, out
    result = run_script("evaluate/compare.py", tmp_path / "base", "--out", tmp_path / "base", check=False)
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'base'}: is a folder; name the files' prefix, such as {tmp_path / 'base' / 'comparison'}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


# --- outputs that cannot be swapped in whole --------------------------------------------------


def test_out_paths_that_cannot_be_outputs_get_one_line(tmp_path):
    real = tmp_path / "real"
    assert prepare(real).returncode == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    refused(prepare(link), "is a symbolic link")
    refused(prepare(".", cwd=tmp_path), "is the current folder")
    (tmp_path / "afile").write_text("keep")
    refused(prepare(tmp_path / "afile" / "sub"), "afile is a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "link", "real"]  # no leftovers
    assert link.is_symlink() and (real / "test.jsonl").is_file() and (tmp_path / "afile").read_text() == "keep"


# --- one process at a time per output ---------------------------------------------------------

HOLD = "import sys, time; from rectune.core.locks import hold_output_lock; hold_output_lock(sys.argv[1]); print('held', flush=True); time.sleep(600)"  # noqa: E501


@pytest.fixture
def holder():
    """Start a process that holds an output's lock; yields a function taking the output path."""
    started = []

    def hold(target):
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(target)], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert process.stdout.readline() == "held\n"
        started.append(process)
        return process

    yield hold
    for process in started:
        process.kill()
        process.wait()


def test_a_run_that_fails_on_its_input_leaves_no_folder_it_made(tmp_path):
    (tmp_path / "kept").mkdir()  # a folder that was there before stays, empty or not
    for out in (tmp_path / "reports" / "demo" / "base", tmp_path / "kept" / "base"):
        result = run_script("evaluate/run.py", "--model", "baseline:popularity", "--data", tmp_path / "none.jsonl",
                            "--out", out, "--no-wandb", check=False)  # fmt: skip
        assert result.returncode != 0 and "none.jsonl: file not found" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not any((tmp_path / "kept").iterdir())


def test_data_prep_stops_while_another_process_owns_its_folder_and_takes_over_a_dead_ones(tmp_path, holder):
    out = tmp_path / "data"
    process = holder(out)
    refused(prepare(out), f"in use by process {process.pid}")
    assert not out.exists()
    process.send_signal(signal.SIGKILL)  # dies holding it: the lock file stays
    process.wait()
    assert lock_path(out).is_file()
    assert prepare(out).returncode == 0  # taken over
    assert (out / "test.jsonl").is_file() and not lock_path(out).exists()


def test_training_eval_and_merge_stop_while_another_process_owns_their_output(
    tmp_path, holder, tiny_model, train_data, adapters, movie_data
):
    sft = tmp_path / "run" / "sft"
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(sft), max_steps=1, use_peft=True,
        report_to=["none"], datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    process = holder(sft)
    refused(run_script("train/sft.py", recipe, check=False), f"in use by process {process.pid}")
    assert not sft.exists()

    report = tmp_path / "eval"
    process = holder(report)
    evaluate = ("--model", tiny_model, "--data", movie_data / "test.jsonl", "--out", report, "--no-wandb")
    refused(run_script("evaluate/run.py", *evaluate, check=False), f"in use by process {process.pid}")
    assert not report.exists()

    merged = tmp_path / "merged"
    process = holder(merged)
    result = run_script("train/merge.py", "--adapters", *adapters, "--out", merged, check=False)
    refused(result, f"in use by process {process.pid}")
    assert not merged.exists()

    sft_base = shutil.copytree(adapters[0], tmp_path / "adapter") / "merged"
    process = holder(sft_base)
    refused(run_script("train/sft_base.py", sft_base.parent, check=False), f"in use by process {process.pid}")
    assert not sft_base.exists()


# --- a full disk ------------------------------------------------------------------------------


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare and a mount namespace (to make a small tmpfs)")
def test_merge_on_a_full_disk_gets_one_line_and_leaves_nothing(tmp_path, adapters):
    """The full model goes to a 64 KB tmpfs (a real full disk, private to the command's mount namespace)."""
    small = tmp_path / "small"
    small.mkdir()
    merge = " ".join(
        shlex.quote(str(arg))
        for arg in (sys.executable, ROOT / "train/merge.py", "--adapters", *adapters, "--out", tmp_path / "merged",
                    "--full-model", small / "full")
    )  # fmt: skip
    folder = shlex.quote(str(small))
    script = f"mount -t tmpfs -o size=64k tmpfs {folder} && {{ {merge}; echo status=$?; ls -A {folder}; }}"
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert "status=2\n" in result.stdout, result.stderr[-3000:]
    error = result.stderr.splitlines()[-1]
    assert error == f"error: {small / 'full'}: no space left on the device while writing it; nothing replaced"
    assert result.stdout.split("status=2\n")[1] == ""  # nothing left on the full disk: no staging folder, no lock


def test_training_makes_its_weights_shareable_and_leaves_a_private_file_of_yours_private(tmp_path, tiny_model,
                                                                                         train_data):  # fmt: skip
    """safetensors writes private files, which the run's end made readable; it did so to every private file in
    the folder changed since the run began, one of yours put there while it trained too."""
    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(out), max_steps=60,
        save_steps=25, logging_steps=1, report_to=["none"], use_peft=True, lora_r=4, lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    run = subprocess.Popen(
        [sys.executable, ROOT / "train/sft.py", recipe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    output = []
    for line in run.stdout:
        output.append(line)
        if "'loss'" in line and not (out / "notes.txt").exists():  # training: the folder is the run's
            (out / "notes.txt").write_text("my API key\n")
            (out / "notes.txt").chmod(0o600)
    assert run.wait(timeout=600) == 0, "".join(output)[-3000:]
    assert (out / "finished.json").is_file()
    assert (out / "notes.txt").stat().st_mode & 0o777 == 0o600
    for weights in (out / "adapter_model.safetensors", out / "checkpoint-25" / "adapter_model.safetensors"):
        assert weights.stat().st_mode & 0o777 == SHAREABLE, weights


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare and a mount namespace (to make a small tmpfs)")
def test_training_on_a_full_disk_gets_one_line(tmp_path, tiny_model, train_data):
    """The run folder on a 64 KB tmpfs: its marker and records fit, its first checkpoint does not."""
    small = tmp_path / "small"
    small.mkdir()
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(small / "run"), max_steps=2,
        save_steps=1, report_to=["none"], use_peft=True, lora_r=4, lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    train = " ".join(shlex.quote(str(arg)) for arg in (sys.executable, ROOT / "train/sft.py", recipe))
    folder = shlex.quote(str(small))
    script = f"mount -t tmpfs -o size=64k tmpfs {folder} && {{ {train}; echo status=$?; }}"
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert "status=2\n" in result.stdout, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"error: {small / 'run'}: no space left on the device while saving a checkpoint; free some and rerun: it "
        "resumes from the last complete checkpoint"
    )


def test_a_comparison_that_fails_half_way_can_be_rerun_and_a_full_disk_names_the_file(tmp_path):
    from rectune.core.io import atomic_write
    from rectune.core.owned_files import file_outputs

    paths = [tmp_path / "cmp.md", tmp_path / "cmp.csv", tmp_path / "cmp.png"]
    with pytest.raises(RuntimeError), file_outputs(paths, overwrite=False):
        for path in paths[:2]:
            with atomic_write(path) as handle:
                handle.write("table\n")
        raise RuntimeError("the chart failed")
    with file_outputs(paths, overwrite=False):  # what the failed run wrote is RecTune's: replaced, not refused
        for path in paths:
            with atomic_write(path) as handle:
                handle.write("again\n")

    with pytest.raises(OSError) as caught, atomic_write(tmp_path / "big.md"):
        raise OSError(errno.ENOSPC, "No space left on device")  # as a write to a full disk fails: no file named
    assert caught.value.filename == str(tmp_path / "big.md") and not (tmp_path / "big.md").exists()
