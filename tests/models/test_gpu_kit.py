"""`make gpu-kit` on the CPU: the kit installs into a clean environment holding only torch and the packages
of the lent machines' image, and its script runs the GPU check at a toy size there, end to end.

The image is simulated by linking those packages (the names in ``perf.gpu_kit.IMAGE``) from this
checkout's environment into a new virtual environment; everything else the check imports must come from
the kit. The kit is built for this machine's Python (3.11: the only one here with torch); the lent
machines take ``--python 3.12``, the default.
"""

import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

from conftest import ROOT
from packaging.utils import canonicalize_name

from perf.gpu_kit import LIMIT_MIB, image_packages
from rectune.core.outputs import write_marker

TOY = ["--device", "cpu", "--model-shape", "smollm2-135m", "--shape-layers", "2", "--settings", "baseline",
       "--sft-steps", "2", "--max-length", "1024", "--batch-size", "1", "--plain-steps", "2", "--grpo-steps", "1",
       "--grpo-batch", "1", "--completion-length", "8", "--rollout-rounds", "1", "--queries", "2",
       "--profile-steps", "2"]  # fmt: skip


def image_environment(folder: Path) -> Path:
    """A virtual environment that sees torch and the image's packages only (linked from this one)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    (site,) = (folder / "lib").glob("python3.*/site-packages")
    image = folder / "image"
    image.mkdir()
    wanted = image_packages()
    for distribution in importlib.metadata.distributions():
        if canonicalize_name(distribution.metadata["Name"]) not in wanted:
            continue
        for top in {Path(f).parts[0] for f in distribution.files or [] if Path(f).parts[0] != ".."}:
            source = Path(distribution.locate_file(top))
            if source.exists() and not top.endswith(".pth") and not (image / top).exists():
                (image / top).symlink_to(source)
    (site / "image.pth").write_text(f"{image}\n")
    return folder / "bin" / "python"


def test_the_kit_installs_into_a_bare_image_and_runs_the_gpu_check(tmp_path):
    kit = tmp_path / "kit"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    built = subprocess.run([sys.executable, "-m", "perf.gpu_kit", "build", "--python", python, "--out", str(kit)],
                           capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    size = sum(path.stat().st_size for path in kit.rglob("*") if path.is_file())
    assert size <= LIMIT_MIB * 2**20 and f"(limit {LIMIT_MIB})" in built.stdout
    bare = image_environment(tmp_path / "image-env")
    lacking = subprocess.run([bare, "-c", "import trl"], capture_output=True, text=True)
    assert "No module named 'trl'" in lacking.stderr  # the environment is bare of what the kit brings
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    collected = tmp_path / "collected"  # what a lent machine sends back: the log and the runs' small files
    result = subprocess.run(["bash", str(kit / "run_gpu_check.sh"), str(tmp_path / "run"), "900", "--collect",
                             str(collected), *TOY],
                            capture_output=True, text=True, cwd=tmp_path, env={**env, "PYTHON": str(bare)})  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "gpu-kit: the" in result.stdout and "requirements on the image are met" in result.stdout
    log = (tmp_path / "run" / "gpu_check.log").read_text()
    assert (collected / "gpu_check.log").read_text() == log
    with tarfile.open(collected / "runs.tgz") as runs:
        names = runs.getnames()
    assert "gpu_check/sft-baseline.log" in names and "gpu_check/grpo-compiled.log" in names
    assert any(name.endswith("/trainer_state.json") for name in names)  # each run's figures, step by step
    assert not [n for n in names if n.endswith((".safetensors", ".pt", ".bin")) or "/shape-" in n or "/trace-" in n]
    rows = [
        line.strip().strip("|").split("|") for line in log.splitlines() if line.startswith("| ") and "---" not in line
    ]
    named = {cells[0].strip(): [cell.strip() for cell in cells] for cells in rows}
    # tokens/s over the run and over the steps after the first (step_time logged by train/sft.py), its MFU
    assert all(float(cell.replace(",", "")) > 0 for cell in named["baseline"][1:3])
    assert named["baseline"][3].endswith("%")
    # the toy trains on something: 1,024-token sequences hold whole demo examples (~870 tokens), answers included
    first, last = map(float, named["baseline"][7].split(" → "))
    assert first > 0 and last > 0
    # the anchor rows: a plain PyTorch loop at the same shape and batch, causal and with documents masked apart,
    # and the baseline as a multiple of each
    for anchor in ("causal", "documents masked as packed"):
        assert float(named[f"plain PyTorch loop, {anchor}"][2].replace(",", "")) > 0
    assert re.search(r"baseline: [0-9.]+x the causal loop's tokens/s over the run, [0-9.]+x after step 1; "
                     r"[0-9.]+x the document-masked loop's", log)  # fmt: skip
    assert {
        "generate",
        "generate, each prompt encoded per completion, as TRL",
        "generate, static cache, compiled",
        "continuous batching",
        "continuous batching, sized to the step",
        "HF generate, batched",
        "transformers serve, continuous batching",
    } <= set(named)
    for evaluation in ("HF generate, batched", "transformers serve, continuous batching"):  # a failure names why
        assert float(named[evaluation][1].replace(",", "")) > 0, named[evaluation]
    # each GRPO row says where its step went: generation, its prefill, the loss's forward and the backward
    for engine in (
        "generate",
        "generate, each prompt encoded per completion, as TRL",
        "generate, static cache, compiled",
    ):
        assert all(float(cell) > 0 for cell in named[engine][3:7])
    # the default SFT path's last step profiled, its operators listed by self time
    assert "the baseline's step profiled (train/sft.py --profile_steps):" in log and "aten::mm" in log


def test_a_folder_the_kit_did_not_write_is_never_replaced(tmp_path):
    theirs = tmp_path / "kit"
    theirs.mkdir()
    (theirs / "requirements.txt").write_text("mine\n")  # a kit's file name, but no marker
    result = subprocess.run([sys.executable, "-m", "perf.gpu_kit", "build", "--out", str(theirs)],
                            capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert result.returncode == 1
    assert f"gpu-kit: {theirs}: holds files RecTune did not write there (requirements.txt; no" in result.stderr
    assert [p.name for p in theirs.iterdir()] == ["requirements.txt"] and (
        theirs / "requirements.txt"
    ).read_text() == "mine\n"
    write_marker(theirs, "gpu kit", ["requirements.txt"])  # a kit someone added a file to
    (theirs / "notes.txt").write_text("mine\n")
    result = subprocess.run([sys.executable, "-m", "perf.gpu_kit", "build", "--out", str(theirs)],
                            capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert result.returncode == 1 and "holds files RecTune did not write there (notes.txt)" in result.stderr
    assert sorted(p.name for p in theirs.iterdir()) == [".rectune.json", "notes.txt", "requirements.txt"]


def test_the_kits_script_never_writes_into_a_folder_it_did_not_write(tmp_path):
    from perf.gpu_kit import SCRIPT

    script = tmp_path / "run_gpu_check.sh"
    script.write_text(SCRIPT)
    theirs = tmp_path / "results"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    result = subprocess.run(["bash", str(script), str(theirs), "60"], capture_output=True, text=True)
    assert result.returncode == 1
    refusal = f"run_gpu_check.sh: {theirs} exists and was not written by this script; choose another folder\n"
    assert result.stderr == refusal
    assert [p.name for p in theirs.iterdir()] == ["notes.txt"] and (theirs / "notes.txt").read_text() == "mine\n"
    (theirs / "gpu_check.log").write_text("an earlier lease's\n")  # the folder --collect would copy into
    fresh = tmp_path / "run"
    result = subprocess.run(["bash", str(script), str(fresh), "60", "--collect", str(theirs)], capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == 1 and "already holds gpu_check.log or runs.tgz" in result.stderr
    assert not fresh.exists() and (theirs / "gpu_check.log").read_text() == "an earlier lease's\n"


def test_the_gpu_check_prints_each_line_as_it_goes(tmp_path):
    # piped to the kit's log and stopped by its time limit, the check must have written what it measured so far,
    # whether or not the environment asks Python for unbuffered output
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    check = subprocess.Popen([sys.executable, "-m", "perf.gpu_check", *TOY, "--out", str(tmp_path / "check")],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                             start_new_session=True)  # fmt: skip
    try:
        lines = iter(check.stdout.readline, "")
        first = next(line for line in lines if "matmul peak" in line)  # the first measurement, seconds in
        assert first.startswith("CPU: matmul peak ")
        # it arrives before the first SFT run ends (held in a buffer, it came only with that run's table row)
        assert not list((tmp_path / "check").glob("sft-baseline/checkpoint-*")), "the output was held back"
    finally:
        os.killpg(check.pid, signal.SIGKILL)  # the check and any step it started
        check.wait()
