"""Running gpu-check's steps as a user would and reading their figures back from what they wrote."""

import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from perf import ROOT
from perf.folders import GrowingFolder

GRPO_PARTS = ("generate", "prefill", "forward", "backward")  # rectune/training/diagnostics.py's seconds/<part>
CONCURRENCY = 32  # requests the served evaluation keeps in flight


def run(command: list[str], log: Path, env: dict | None = None, fatal: bool = True) -> float | None:
    """Run a step as a user would, its output in ``log``; returns the wall time. A failure stops the check, or
    with ``fatal=False`` (one row of a table: a setting out of the GPU's memory, say) returns None."""
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        result = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env or os.environ)
    if result.returncode != 0:
        if not fatal:
            return None
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        sys.exit(f"gpu-check: step failed ({' '.join(command)}):\n{tail}\nfull log: {log}")
    return time.perf_counter() - start


def failure(log: Path) -> str:
    """The last line of a failed step's log that names an error, for its row."""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line or "error" in line]
    return (named or lines or ["no output"])[-1][:160].replace("|", "/")


def log_history(output_dir: Path) -> list[dict]:
    """What a finished run logged, step by step (its last checkpoint's trainer_state.json)."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return json.loads(states[-1].read_text(encoding="utf-8"))["log_history"]


def training_losses(output_dir: Path) -> list[float]:
    """The loss logged at each step of a finished run."""
    return [entry["loss"] for entry in log_history(output_dir) if "loss" in entry]


def step_parts(output_dir: Path) -> dict[str, float]:
    """The median seconds a GRPO step spent in each part (the first step's warm-up left out when there are more)."""
    logged = [entry for entry in log_history(output_dir) if "seconds/generate" in entry]
    steps = logged[1:] or logged
    return {part: statistics.median(entry[f"seconds/{part}"] for entry in steps) for part in GRPO_PARTS}


def training_figures(output_dir: Path) -> tuple[float, float, float | None]:
    """(tokens/s, seconds, peak memory in GiB) of a finished run, from its trainer_state.json and its log."""
    tokens = max(entry.get("num_tokens", 0) for entry in log_history(output_dir))
    log = output_dir.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
    runtime = float(re.findall(r"'train_runtime': '?([0-9.e+-]+)", log)[-1])
    peak = re.findall(r"peak (?:GPU|resident) memory ([0-9.]+) GiB", log)
    return tokens / runtime, runtime, float(peak[-1]) if peak else None


def steady_tokens_per_second(output_dir: Path) -> float | None:
    """Tokens/s of a finished run's median step after its first (which compiles kernels and settles the
    allocator): each log's new ``num_tokens`` over its steps' ``step_time``, the median over the logs, as the
    plain loop takes the median of its steps (one step the machine stalled in moves a mean, not a median).
    None where fewer than two steps were logged."""
    logged = [entry for entry in log_history(output_dir) if "step_time" in entry and "num_tokens" in entry]
    rates = [
        (now["num_tokens"] - before["num_tokens"]) / (now["step_time"] * (now["step"] - before["step"]))
        for before, now in itertools.pairwise(logged)
    ]
    return statistics.median(rates) if rates else None


def generated_tokens(model: str, folder: Path) -> int:
    """Tokens in the completions an evaluation wrote (the script's wall time includes loading the model)."""
    from transformers import AutoTokenizer

    from rectune.models.embedded import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(model))
    lines = (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    rows = (json.loads(line) for line in lines if line)
    return sum(len(tokenizer(row["completion"], add_special_tokens=False)["input_ids"]) for row in rows)


def serve_command(model: str, port: int, device: str) -> list[str]:
    """``transformers serve --continuous-batching`` on ``port``. On a CPU its paged cache is sized for the
    evaluation's requests in flight, 2,048 tokens each: else transformers sizes the cache and its attention
    masks from 0.9 of the machine's whole RAM (12.4 GiB for the toy; docs/evaluation.md)."""
    # the CLI's module, not its script: an offline kit installs packages where no script is on PATH
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", model, "--host", "127.0.0.1",
               "--port", str(port), "--device", device, "--continuous-batching"]  # fmt: skip
    if device == "cpu":
        command += ["--cb-num-blocks", str(CONCURRENCY * 2048 // 256), "--cb-max-batch-tokens", "1024"]
    return command


def serve_and_evaluate(model: str, device: str, eval_flags: list[str], out: GrowingFolder) -> tuple[float | None, str]:
    """``transformers serve --continuous-batching`` on a free loopback port, evaluated through it: the wall seconds,
    or None and why the server or the evaluation failed (its row says so, and the check goes on)."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serve = serve_command(model, port, device)
    serve_log = out.entry("serve.log")
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with serve_log.open("w", encoding="utf-8") as log:  # the server holds its own copy of the file
        server = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=offline)
    try:
        deadline = time.monotonic() + 600
        while server.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(1)
        else:
            ended = f"exited ({server.returncode})" if server.poll() is not None else "did not answer in 600 s"
            return None, f"transformers serve {ended}: {failure(serve_log)}"
        served = [*eval_flags, "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--api-model",
                  model, "--concurrency", str(CONCURRENCY), "--out", str(out.entry("eval_served"))]  # fmt: skip
        seconds = run([sys.executable, "evaluate/run.py", *served], out.entry("eval_served.log"), fatal=False)
        if seconds is None and server.poll() is not None:
            return None, f"transformers serve exited ({server.returncode}) mid-run: {failure(serve_log)}"
        return seconds, "" if seconds else failure(out.entry("eval_served.log"))
    finally:
        server.terminate()
        server.wait(timeout=60)
