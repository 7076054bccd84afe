"""The GPU paths in one command, offline, on one CUDA GPU: `make gpu-check` (about 5 minutes on an H100).

Steps, each timed, with tokens/s and model-FLOPs utilisation (MFU):

1. the GPU's bf16 matmul peak, measured (8192^3 products), the denominator of MFU;
2. bf16 LoRA SFT on the demo data for ``--sft-steps`` steps (train/sft.py, the CPU recipe with bf16 on);
3. GRPO for ``--grpo-steps`` steps, generating with vLLM (``use_vllm``, colocate) when vLLM is
   installed, else with transformers' generate;
4. evaluate/run.py with ``--backend vllm`` against ``--backend hf`` on the same 32 queries, greedy:
   how many completions agree (vLLM only);
5. the SFT step again under DeepSpeed ZeRO-2 on one GPU (accelerate_configs/zero2.yaml,
   ``--num_processes 1``; needs ``pip install -e .[deepspeed]``).

A step whose optional package is missing is reported as skipped, with the reason. Training MFU counts
6 x parameters x tokens/s (a dense model's training FLOPs; LoRA skips the frozen weights' gradients,
so the true utilisation is somewhat lower; GRPO's tokens are TRL's count of prompt and completion
tokens, its generation included in the time), generation MFU 2 x parameters x generated tokens/s over
the script's whole wall time (model loading included), both over the measured matmul peak.

    python -m perf.gpu_check [--model embedded:smollm2] [--out outputs/gpu_check]
"""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SFT_RECIPE = ROOT / "recipes/smollm2_movie_cpu.yaml"
GRPO_RECIPE = ROOT / "recipes/smollm2_movie_cpu_grpo.yaml"
DATA = ROOT / "data/demo_movie"


def matmul_peak(size: int = 8192, repeats: int = 10) -> float:
    """Measured bf16 matmul FLOP/s (the mean of ``repeats`` products after warm-up)."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def parameter_count(model: str) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    from rectune.models import resolve_model_name

    with __import__("torch").device("meta"):
        network = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(resolve_model_name(model)))
    return sum(p.numel() for p in network.parameters())


def run(command: list[str], log: Path) -> float:
    """Run a step as a user would, its output in ``log``; returns the wall time; a failure stops the check."""
    start = time.perf_counter()
    with log.open("w") as handle:
        result = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=os.environ)
    if result.returncode != 0:
        tail = log.read_text()[-3000:]
        sys.exit(f"gpu-check: step failed ({' '.join(command)}):\n{tail}\nfull log: {log}")
    return time.perf_counter() - start


def training_throughput(output_dir: Path, log: Path) -> tuple[float, float]:
    """(tokens/s, seconds) of a finished TRL run: tokens from its last checkpoint's trainer_state.json,
    the training time from the summary the trainer prints at the end."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    tokens = max(entry.get("num_tokens", 0) for entry in json.loads(states[-1].read_text())["log_history"])
    runtime = float(re.findall(r"'train_runtime': '?([0-9.e+-]+)", log.read_text())[-1])
    return tokens / runtime, runtime


def generated_tokens(model: str, folder: Path) -> int:
    """Tokens in the completions an evaluation wrote (the script's wall time includes loading the model)."""
    from transformers import AutoTokenizer

    from rectune.models import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(model))
    rows = (json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line)
    return sum(len(tokenizer(row["completion"], add_special_tokens=False)["input_ids"]) for row in rows)


def agreement(hf_dir: Path, vllm_dir: Path) -> tuple[int, int]:
    def completions(folder: Path) -> dict[str, str]:
        rows = (json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line)
        return {row["id"]: row["completion"].strip() for row in rows}

    hf, vllm = completions(hf_dir), completions(vllm_dir)
    return sum(hf[i] == vllm.get(i) for i in hf), len(hf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2", help="model the steps train and evaluate")
    parser.add_argument("--out", default="outputs/gpu_check", help="folder for the runs and logs (replaced)")
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--queries", type=int, default=32)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu-check needs a CUDA GPU (torch.cuda.is_available() is False)")
    out = (ROOT / args.out).resolve()
    if out.exists() and not (out / ".gpu_check").is_file():
        sys.exit(f"gpu-check: {out} exists and was not written by gpu-check; choose another --out")
    subprocess.run(["rm", "-rf", str(out)], check=True)
    out.mkdir(parents=True)
    (out / ".gpu_check").write_text("written by perf/gpu_check.py\n")
    os.environ.setdefault("WANDB_MODE", "disabled")
    if not (DATA / "train_sft.jsonl").is_file():
        run(["make", "-s", "data-demo", f"PY={sys.executable}", "STAMP="], out / "data.log")

    python = sys.executable
    results: list[tuple[str, str]] = []
    peak = matmul_peak()
    n_params = parameter_count(args.model)
    print(
        f"{torch.cuda.get_device_name()}: bf16 matmul {peak / 1e12:.0f} TFLOP/s measured; model {n_params / 1e6:.0f}M"
    )

    def train_figures(folder: Path) -> str:
        tokens_per_s, runtime = training_throughput(folder, folder.with_suffix(".log"))
        return f"{tokens_per_s:,.0f} tokens/s, MFU {6 * n_params * tokens_per_s / peak:.1%}, {runtime:.0f} s"

    # the CPU recipe with GPU settings: bf16, 8 packed 1,024-token sequences per step
    sft_flags = ["--model_name_or_path", args.model, "--bf16", "true", "--max_steps", str(args.sft_steps),
                 "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                 "--save_steps", str(args.sft_steps), "--report_to", "none", "--logging_steps", "5"]  # fmt: skip
    run([python, "train/sft.py", str(SFT_RECIPE), *sft_flags, "--output_dir", str(out / "sft")], out / "sft.log")
    results.append(("bf16 LoRA SFT", train_figures(out / "sft")))
    print(f"SFT: {results[-1][1]}")

    has_vllm = importlib.util.find_spec("vllm") is not None
    grpo_flags = ["--model_name_or_path", args.model, "--bf16", "true", "--max_steps", str(args.grpo_steps),
                  "--save_steps", str(args.grpo_steps), "--report_to", "none"]  # fmt: skip
    if has_vllm:
        grpo_flags += ["--use_vllm", "true", "--vllm_mode", "colocate"]
    grpo_flags += ["--output_dir", str(out / "grpo")]
    run([python, "train/grpo.py", str(GRPO_RECIPE), *grpo_flags], out / "grpo.log")
    generator = "vLLM colocate" if has_vllm else "transformers generate (vLLM not installed)"
    results.append((f"GRPO, {generator}", train_figures(out / "grpo")))
    print(f"GRPO: {results[-1][1]}")

    eval_flags = ["--model", args.model, "--data", str(DATA / "test.jsonl"), "--limit", str(args.queries),
                  "--max-new-tokens", "64", "--batch-size", "32", "--no-wandb"]  # fmt: skip

    def generation_figures(folder: Path, seconds: float) -> str:
        tokens_per_s = generated_tokens(args.model, folder) / seconds
        return f"{tokens_per_s:,.0f} generated tokens/s, MFU {2 * n_params * tokens_per_s / peak:.2%}, {seconds:.0f} s"

    hf_seconds = run([python, "evaluate/run.py", *eval_flags, "--out", str(out / "eval_hf")], out / "eval_hf.log")
    if has_vllm:
        vllm_flags = [*eval_flags, "--backend", "vllm", "--out", str(out / "eval_vllm")]
        vllm_seconds = run([python, "evaluate/run.py", *vllm_flags], out / "eval_vllm.log")
        same, total = agreement(out / "eval_hf", out / "eval_vllm")
        results.append(("greedy eval, HF backend", generation_figures(out / "eval_hf", hf_seconds)))
        results.append(("greedy eval, vLLM backend", generation_figures(out / "eval_vllm", vllm_seconds)))
        results.append(("greedy eval, vLLM vs HF", f"{same}/{total} completions identical"))
    else:
        results.append(("greedy eval, HF backend", generation_figures(out / "eval_hf", hf_seconds)))
        results.append(("greedy eval, vLLM vs HF", "skipped: vLLM not installed"))
    print(f"eval: {results[-1][1]}")

    if importlib.util.find_spec("deepspeed") is None:
        results.append(("ZeRO-2 LoRA SFT, 1 GPU", "skipped: deepspeed not installed (pip install -e .[deepspeed])"))
    else:
        launch = [python, "-m", "accelerate.commands.launch", "--config_file", "accelerate_configs/zero2.yaml",
                  "--num_processes", "1"]  # fmt: skip
        run([*launch, "train/sft.py", str(SFT_RECIPE), *sft_flags, "--output_dir", str(out / "zero2")],
            out / "zero2.log")  # fmt: skip
        if "training with DEEPSPEED" not in (out / "zero2.log").read_text():
            sys.exit(f"gpu-check: the ZeRO-2 run did not train under DeepSpeed (see {out / 'zero2.log'})")
        results.append(("ZeRO-2 LoRA SFT, 1 GPU", train_figures(out / "zero2")))
    print(f"ZeRO-2: {results[-1][1]}")

    print("\n| step | result |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in results))
    print(f"\nlogs and runs in {out}")


if __name__ == "__main__":
    main()
