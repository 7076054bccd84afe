"""A short run's time in Python's garbage collector: at Python's default settings and as every entry script
sets it (rectune/core/gc_pause.py, called by rectune.core.cli.run).

Each round runs the same two commands once each way, interleaved, on the demo data with the embedded model:
a one-step LoRA SFT (train/sft.py, the CPU recipe) and an evaluation of two queries (evaluate/run.py). A
child process times every collection through ``gc.callbacks``; the default arm replaces the tuning with
nothing, which is all that differs. Wall times include loading torch, transformers and TRL, and vary with
the page cache; the collector's seconds are the steadier figure.

    python -m perf.bench_startup [--rounds 3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from perf import ROOT

# the child: count the collector's time, then run the script as `python SCRIPT ARGS` would
CHILD = """
import atexit, gc, json, runpy, sys, time
spent, began = [0.0], [0.0]
def clock(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - began[0]
gc.callbacks.append(clock)
start = time.perf_counter()
report, arm = sys.argv[1], sys.argv[2]
def write():
    with open(report, "w") as out:
        json.dump({"wall": time.perf_counter() - start, "gc": spent[0]}, out)
atexit.register(write)
if arm == "default":
    import rectune.core.cli
    rectune.core.cli.tune_collection_for_a_run = lambda: None
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def commands(folder: Path) -> dict[str, list[str]]:
    data = ROOT / "data/demo_movie"
    return {
        "one-step SFT (train/sft.py)": [
            "train/sft.py", "recipes/smollm2_movie_cpu.yaml", "--max_steps", "1", "--save_steps", "1",
            "--report_to", "none", "--output_dir", str(folder / "sft"),
        ],
        "evaluation of 2 queries (evaluate/run.py)": [
            "evaluate/run.py", "--model", "embedded:smollm2", "--data", str(data / "test.jsonl"), "--limit", "2",
            "--max-new-tokens", "16", "--no-wandb", "--out", str(folder / "eval"),
        ],
    }  # fmt: skip


def timed(arm: str, command: list[str], folder: Path) -> dict[str, float]:
    report = folder / "report.json"
    for output in ("sft", "eval"):  # each run starts afresh, so each loads and trains alike
        shutil.rmtree(folder / output, ignore_errors=True)
    result = subprocess.run([sys.executable, "-c", CHILD, str(report), arm, *command], cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})  # fmt: skip
    if result.returncode != 0:
        sys.exit(f"bench-startup: {command[0]} failed:\n{result.stderr[-2000:]}")
    return json.loads(report.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not (ROOT / "data/demo_movie/test.jsonl").is_file():
        sys.exit("bench-startup: data/demo_movie is missing: run `make data-demo` first")
    with tempfile.TemporaryDirectory(prefix="rectune-bench-startup-") as scratch:
        folder = Path(scratch)
        runs = commands(folder)
        measured = {(name, arm): [] for name in runs for arm in ("default", "tuned")}
        for _ in range(args.rounds):
            for name, command in runs.items():
                for arm in ("default", "tuned"):
                    measured[name, arm].append(timed(arm, command, folder))
    print(f"{args.rounds} rounds, medians; python {sys.version.split()[0]}")
    print("| run | collector s, default | collector s, tuned | wall s, default | wall s, tuned | wall, tuned/default |")
    print("|---|---|---|---|---|---|")
    for name in runs:
        default, tuned = measured[name, "default"], measured[name, "tuned"]
        gc_default, gc_tuned = (statistics.median(run["gc"] for run in arm) for arm in (default, tuned))
        wall_default, wall_tuned = (statistics.median(run["wall"] for run in arm) for arm in (default, tuned))
        print(f"| {name} | {gc_default:.2f} | {gc_tuned:.2f} | {wall_default:.2f} | {wall_tuned:.2f} "
              f"| {wall_tuned / wall_default:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
