"""Queries per second through an OpenAI-compatible server against in-process generation, embedded model, CPU.

`transformers serve` runs the embedded SmolLM2-135M-Instruct on 127.0.0.1 (plain, with --continuous-batching,
and with its paged cache sized for 8 requests of 2,048 tokens; each server's peak memory reported); RecTune's
`--backend openai` path sends the same 16 RecBench+-style prompts at concurrency 1 and 8, greedy, up to 48 new
tokens each; `--backend hf` generates them in this process in batches of 8. All in one run, so the ratios
compare like with like.

    python -m perf.bench_endpoint
"""

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch

from perf.bench_generation import QUERIES
from rectune.benchmarks.recbench.prompts import system_prompt
from rectune.evaluation.endpoint import Endpoint, generate_endpoint
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint
from rectune.models.embedded import EMBEDDED, resolve_model_name
from rectune.models.generation import GenerationSettings, generate

SETTINGS = GenerationSettings(batch_size=8, max_new_tokens=48)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(model: str, port: int, *flags: str) -> subprocess.Popen:
    command = [str(Path(sys.executable).parent / "transformers"), "serve", model, "--host", "127.0.0.1",
               "--port", str(port), "--device", "cpu", *flags]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("transformers serve did not start")


def peak_memory_gib(pid: int) -> float | None:
    """A live process's peak resident memory (Linux's VmHWM), or None where /proc does not tell."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return kib / 2**20 if kib is not None else None


def timed(batches) -> tuple[float, int]:
    start = time.perf_counter()
    answers = [item for batch in batches for item in batch]
    return time.perf_counter() - start, len(answers)


def main() -> None:
    prompts = [[{"role": "system", "content": system_prompt("movie")}, {"role": "user", "content": q}] for q in QUERIES]
    n = len(prompts)
    model_path = resolve_model_name(EMBEDDED)
    results = {}
    model, tokenizer = load_for_generation(resolve_checkpoint(EMBEDDED))
    timed(generate(model, tokenizer, prompts[:2], SETTINGS))  # warm-up
    results["hf, batch 8 (in process)"] = timed(generate(model, tokenizer, prompts, SETTINGS))
    del model
    sized = ("--continuous-batching", "--cb-num-blocks", "64", "--cb-max-batch-tokens", "1024")  # 8 x 2,048 tokens
    servers = (("transformers serve", ()), ("transformers serve --continuous-batching", ("--continuous-batching",)),
               ("transformers serve --continuous-batching, cache for 8 requests", sized))  # fmt: skip
    peaks = {}
    for label, flags in servers:
        port = free_port()
        server = serve(model_path, port, *flags)
        try:
            endpoint = Endpoint(f"http://127.0.0.1:{port}/v1", model_path, concurrency=8)
            timed(generate_endpoint(endpoint, prompts[:2], SETTINGS))  # warm-up: the server loads the model
            for concurrency in (1, 8):
                endpoint.concurrency = concurrency
                results[f"openai -> {label}, concurrency {concurrency}"] = timed(
                    generate_endpoint(endpoint, prompts, SETTINGS)
                )
        finally:
            peaks[label] = peak_memory_gib(server.pid)
            server.kill()
            server.wait()
    print(f"{n} queries, greedy, max 48 new tokens, embedded SmolLM2-135M-Instruct, {torch.get_num_threads()} threads")
    base = results["hf, batch 8 (in process)"][0]
    print("| backend | seconds | queries/s | relative to hf | server's peak memory |")
    print("|---|---|---|---|---|")
    for label, (seconds, answered) in results.items():
        assert answered == n, f"{label}: {answered} of {n} answers"
        peak = next((f"{gib:.1f} GiB" for server, gib in peaks.items() if label.endswith(f"> {server}, concurrency 1")
                     and gib is not None), "")  # fmt: skip
        print(f"| {label} | {seconds:.1f} | {n / seconds:.2f} | {base / seconds:.2f}x | {peak} |")


if __name__ == "__main__":
    main()
