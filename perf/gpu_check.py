"""The GPU paths in one command, offline, on one CUDA GPU: `make gpu-check [MODEL_SHAPE=qwen2.5-3b]`.

Steps, each a real run of the project's scripts, timed:

1. the device's matmul peak, measured (bf16 8192^3 products on a GPU), the denominator of MFU;
2. LoRA SFT once per speed setting (``--settings``), each with tokens/s, MFU by the honest LoRA count
   (perf/flops.py), peak memory against perf/memory_estimate.py and its first and last loss; then the
   plain PyTorch loops of perf/plain_loop.py at the same shape, batch and length, in this process, and
   each setting's tokens/s as a multiple of theirs;
3. GRPO with each generation engine (``--engines``), tokens/s of each (generation included) and the
   seconds a step spends in its parts; a baseline SFT run with its last step profiled; the rollouts alone
   (perf/bench_rollouts.py) at the recipe's batch;
4. greedy evaluation: evaluate/run.py's HF backend, and ``transformers serve --continuous-batching``
   through the openai backend, generated tokens/s each.

``--model-shape`` trains a model of a paper model's architecture with random weights (perf/model_shapes.py),
so the figures are the real model's without downloading it. A setting whose package is missing is reported
as skipped, one that fails (out of memory, say) as failed, and the check goes on. ``--parts`` runs some
steps only. ``--device cpu`` runs every step on the CPU at a toy size: the script's own test.

    python -m perf.gpu_check [--model-shape qwen2.5-3b] [--settings baseline,liger] [--out outputs/gpu_check]
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
from dataclasses import dataclass
from importlib.metadata import version

from perf import ROOT
from perf.flops import Shape, generation_flops_per_token, lora_shape, lora_training_flops_per_token, matmul_peak, mfu
from perf.folders import GrowingFolder
from perf.gpu_runs import (
    GRPO_PARTS,
    failure,
    generated_tokens,
    run,
    serve_and_evaluate,
    steady_tokens_per_second,
    step_parts,  # fmt: skip
    training_figures,
    training_losses,
)
from perf.memory_estimate import GIB, training_step_bytes
from perf.plain_loop import TARGETS, plain_loop
from rectune.core.cli import non_negative_int, positive_int
from rectune.core.io import RecTuneError

SFT_RECIPE = ROOT / "recipes/smollm2_movie_cpu.yaml"
GRPO_RECIPE = ROOT / "recipes/smollm2_movie_cpu_grpo.yaml"
DATA = ROOT / "data/demo_movie"
LORA = ["--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", *TARGETS]  # the paper recipes' adapters
# the SFT recipes' LoRA dropout, given to the plain loop too: with checkpointing its masks are drawn twice, and
# on the CPU (SmolLM2-135M, 2 x 1,024 tokens) it took the loop from 198 to 148 tokens/s
SFT_LORA_DROPOUT = 0.05
SETTINGS = {  # name: (flags, the package it needs)
    "baseline": ([], None),
    "no-checkpointing": (["--activation_checkpointing", "false"], None),
    # checkpointing that recomputes less: attention's output kept (TRL's SAC), or every other layer's activations
    "selective": (["--activation_checkpointing_kwargs", '{"selective": true}'], None),
    "every-2-layers": (["--activation_checkpointing_kwargs", '{"every_n_layers": 2}'], None),
    "liger": (["--use_liger_kernel", "true"], "liger_kernel"),
    "flash": (["--attn_implementation", "flash_attention_2"], "flash_attn"),
    "flex": (["--attn_implementation", "flex_attention"], None),  # each packed document apart, block-sparse
    "compile": (["--torch_compile", "true"], None),
    "zero2": ([], "deepspeed"),  # the baseline under DeepSpeed ZeRO-2 on one GPU (accelerate_configs/zero2.yaml)
}


def grpo_engines(completions: int) -> dict[str, tuple[str, list[str]]]:
    """GRPO's engines, by name: (label, flags). Plain generate; it as TRL takes it (the anchor row); it with a
    static cache and compiled decoding (``compile_rollouts``); continuous batching, as TRL sets it up (on a CPU
    RecTune's trainer sizes that cache too: rectune/training/continuous_batching.py) and sized."""
    from perf.bench_rollouts import sized_to_the_step  # here: it loads transformers, after main's JAX setting

    continuous = ["--use_transformers_continuous_batching", "true"]
    sized = json.dumps(sized_to_the_step(completions))
    return {
        "generate": ("generate", []),
        "as-trl": ("generate, each prompt encoded per completion, as TRL", ["--shared_prefix", "false"]),
        "compiled": ("generate, static cache, compiled", ["--compile_rollouts", "true"]),
        "continuous": ("continuous batching", continuous),
        "continuous-sized": ("continuous batching, sized to the step",
                             [*continuous, "--transformers_continuous_batching_config", sized]),
    }  # fmt: skip


ENGINES = ("generate", "as-trl", "compiled", "continuous", "continuous-sized")
PARTS = ("sft", "grpo", "profile", "rollouts", "eval")  # sft: the settings' rows and the plain loop
PROFILE_ROWS = 25  # operators of the profile shown in the log (the whole table is in the run's profile/ folder)
ZERO2 = ["-m", "accelerate.commands.launch", "--config_file", "accelerate_configs/zero2.yaml", "--num_processes", "1"]


def mean_example_tokens(model: str) -> float:
    """Tokens per SFT example of the demo data (prompt and answer in the chat template): the length each
    packed example attends over, which sets attention's share of the FLOPs."""
    from transformers import AutoTokenizer

    from rectune.models.embedded import resolve_model_name
    from rectune.training.views import view_examples

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(model))
    examples = view_examples(DATA / "train_sft.jsonl")
    lengths = [len(tokenizer.apply_chat_template(e["messages"], tokenize=True)["input_ids"]) for e in examples]
    return statistics.fmean(lengths)


@dataclass
class Check:
    """What the check's parts share: its flags, folder and environment, the model, its shape and the peak."""

    args: argparse.Namespace
    out: GrowingFolder
    env: dict
    model: str
    peak: float  # the device's measured matmul FLOP/s
    shape: Shape
    config: object
    example_tokens: float  # the demo examples' mean length
    flops_per_token: float  # of LoRA training (perf/flops.py)

    @property
    def gpu(self) -> bool:
        return self.args.device == "cuda"

    @property
    def precision(self) -> list[str]:
        return ["--bf16", "true"] if self.gpu else []  # on the CPU RecTune trains in fp32

    def sft_command(self) -> list[str]:
        """train/sft.py with the baseline's settings at the check's shape, batch and length."""
        a = self.args
        return [sys.executable, "train/sft.py", str(SFT_RECIPE), "--model_name_or_path", self.model, *self.precision,
                *LORA, "--lora_dropout", str(SFT_LORA_DROPOUT), "--max_steps", str(a.sft_steps),
                "--save_steps", str(a.sft_steps), "--report_to", "none", "--max_length", str(a.max_length),
                "--per_device_train_batch_size", str(a.batch_size), "--gradient_accumulation_steps", "1",
                "--logging_steps", "1", "--activation_checkpointing", "true"]  # fmt: skip


def sft_rows(check: Check) -> None:
    """One row per speed setting, then the plain loops' rows and each setting as a multiple of them."""
    from rectune.training.setup import keeps_packed_sequences_apart  # here: after main's JAX setting

    args = check.args
    print(
        "\n| SFT setting | tokens/s (run) | tokens/s after step 1 (median step) | MFU after step 1 (LoRA count) "
        "| peak memory | estimate | seconds | loss, first → last |\n|---|---|---|---|---|---|---|---|"
    )
    measured_settings: dict[str, tuple[float, float]] = {}  # tokens/s over the run, median step after the first
    for setting in args.settings.split(","):
        flags, package = SETTINGS[setting]
        if package and importlib.util.find_spec(package) is None:
            print(f"| {setting} | skipped: {package} not installed | | | | | | |")
            continue
        folder, log = check.out.entry(f"sft-{setting}"), check.out.entry(f"sft-{setting}.log")
        command = check.sft_command()
        if setting == "zero2":
            command[1:1] = ZERO2
        if run([*command, *flags, "--output_dir", str(folder)], log, check.env, fatal=False) is None:
            print(f"| {setting} | failed: {failure(log)} | | | | | | |")
            continue
        if setting == "zero2" and "training with DEEPSPEED" not in log.read_text(encoding="utf-8", errors="replace"):
            sys.exit(f"gpu-check: the ZeRO-2 run did not train under DeepSpeed (see {log})")
        tokens_per_s, seconds, measured = training_figures(folder)
        steady = steady_tokens_per_second(folder) or tokens_per_s  # one step: the run's own figure
        # the batch one forward sees: train/sft.py splits it where attention would span its packed sequences
        attention = flags[flags.index("--attn_implementation") + 1] if "--attn_implementation" in flags else "sdpa"
        forward_batch = args.batch_size if keeps_packed_sequences_apart(attention) else 1
        estimate = training_step_bytes(
            check.config, forward_batch, args.max_length, check.shape.lora_params, weight_bytes=2 if check.gpu else 4,
            checkpointing=setting != "no-checkpointing", fused_loss=setting == "liger",
        ) / GIB  # fmt: skip
        estimated = f"{estimate:.1f} GiB" if setting not in ("selective", "every-2-layers") else "n/a (not modelled)"
        shown = f"{measured:.1f} GiB" if measured is not None else "n/a"
        losses = training_losses(folder)  # 0 throughout would mean no token was an answer's (sequences too short)
        utilisation = mfu(check.flops_per_token, steady, check.peak)
        print(f"| {setting} | {tokens_per_s:,.0f} | {steady:,.0f} | {utilisation:.1%} | {shown} "
              f"| {estimated} | {seconds:.0f} | {losses[0]:.3f} → {losses[-1]:.3f} |")  # fmt: skip
        measured_settings[setting] = (tokens_per_s, steady)
    # the anchors, in this process (perf/plain_loop.py): the same shape, batch and length through a lean loop,
    # each row one causal sequence, and with documents of the demo's mean length masked apart as packing does
    loops = {}
    for label, documents in (("causal", None), ("documents masked as packed", int(check.example_tokens))):
        loop = plain_loop(check.model, args.device, args.batch_size, args.max_length, lora_dropout=SFT_LORA_DROPOUT,
                          steps=args.plain_steps, warmup=2 if check.gpu else 1, document_tokens=documents)  # fmt: skip
        loops[label] = loop.tokens_per_second
        seconds = loop.seconds_per_step * (args.plain_steps + 2)
        print(f"| plain PyTorch loop, {label} | | {loop.tokens_per_second:,.0f} | "
              f"{mfu(check.flops_per_token, loop.tokens_per_second, check.peak):.1%} | {loop.peak_gib:.1f} GiB | | "
              f"{seconds:.0f} | {loop.loss:.3f} (random tokens) |")  # fmt: skip
    for setting, (tokens_per_s, steady) in measured_settings.items():
        print(f"{setting}: {tokens_per_s / loops['causal']:.2f}x the causal loop's tokens/s over the run, "
              f"{steady / loops['causal']:.2f}x after step 1; "
              f"{steady / loops['documents masked as packed']:.2f}x the document-masked loop's")  # fmt: skip


def grpo_rows(check: Check) -> None:
    """One GRPO run per generation engine: tokens/s and where a step's seconds went."""
    # One step generates every completion at once and trains on them in micro-batches: 64 sequences of a 3B
    # model with its 152k-word logits in one forward pass ran out of an H200's 140 GiB.
    args = check.args
    completions = args.grpo_batch * 8
    micro = min(args.grpo_micro_batch, completions)
    if completions % micro:
        sys.exit(f"gpu-check: --grpo-micro-batch {micro} must divide the {completions} completions of a step")
    grpo = [sys.executable, "train/grpo.py", str(GRPO_RECIPE), "--model_name_or_path", check.model, *check.precision,
            *LORA, "--max_steps", str(args.grpo_steps), "--save_steps", str(args.grpo_steps), "--report_to", "none",
            "--per_device_train_batch_size", str(micro), "--gradient_accumulation_steps", str(completions // micro),
            "--activation_checkpointing", "true", "--num_generations", "8", "--logging_steps", "1",
            "--max_completion_length", str(args.completion_length)]  # fmt: skip
    print(
        "\n| GRPO generation | tokens/s (step, generation included) | seconds "
        "| seconds a step: " + " | ".join(GRPO_PARTS) + " |\n|---|---|---|" + "---|" * len(GRPO_PARTS)
    )
    for engine in args.engines.split(","):
        label, flags = grpo_engines(completions)[engine]
        folder, log = check.out.entry(f"grpo-{engine}"), check.out.entry(f"grpo-{engine}.log")
        if run([*grpo, *flags, "--output_dir", str(folder)], log, check.env, fatal=False) is None:
            print(f"| {label} | failed: {failure(log)} | |" + " |" * len(GRPO_PARTS))
            continue
        tokens_per_s, seconds, _ = training_figures(folder)
        spent = step_parts(folder)
        print(
            f"| {label} | {tokens_per_s:,.0f} | {seconds:.0f} | {' | '.join(f'{spent[p]:.1f}' for p in GRPO_PARTS)} |"
        )


def profile_rows(check: Check) -> None:
    """Where the default path's step goes: its last step profiled, in a run of its own."""
    folder, steps = check.out.entry("sft-profile"), str(check.args.profile_steps)
    run([*check.sft_command(), "--max_steps", steps, "--save_steps", steps, "--profile_steps", steps,
         "--output_dir", str(folder)], check.out.entry("sft-profile.log"), check.env)  # fmt: skip
    table = (folder / "profile" / f"steps-{steps}-{steps}.txt").read_text(encoding="utf-8").splitlines()
    print("\nthe baseline's step profiled (train/sft.py --profile_steps):\n" + "\n".join(table[: PROFILE_ROWS + 5]))


def rollout_rows(check: Check) -> None:
    """The rollouts alone at GRPO's batch (perf/bench_rollouts.py)."""
    args, log = check.args, check.out.entry("rollouts.log")
    run([sys.executable, "-m", "perf.bench_rollouts", "--model", check.model, "--device", args.device, "--prompts",
         str(args.grpo_batch), "--generations", "8", "--max-new-tokens", str(args.completion_length),
         "--short-max-new-tokens", str(args.completion_length // 2), "--rounds", str(args.rollout_rounds)],
        log, check.env)  # fmt: skip
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    print("\n" + "\n".join(line for line in lines if line.startswith("|")))


def eval_rows(check: Check) -> None:
    """Greedy evaluation through the HF backend and through `transformers serve`, generated tokens/s."""
    out, queries = check.out, str(check.args.queries)
    eval_flags = ["--model", check.model, "--data", str(DATA / "test.jsonl"), "--limit", queries,
                  "--max-new-tokens", "160", "--batch-size", queries, "--no-wandb"]  # fmt: skip
    print("\n| greedy evaluation | generated tokens/s (wall time, loading included) | MFU | seconds |"
          "\n|---|---|---|---|")  # fmt: skip
    hf_seconds = run([sys.executable, "evaluate/run.py", *eval_flags, "--out", str(out.entry("eval_hf"))],
                     out.entry("eval_hf.log"), check.env)  # fmt: skip
    served_seconds, why = serve_and_evaluate(check.model, check.args.device, eval_flags[2:], out)
    evaluated = (("HF generate, batched", out.entry("eval_hf"), hf_seconds),
                 ("transformers serve, continuous batching", out.entry("eval_served"), served_seconds))  # fmt: skip
    flops = generation_flops_per_token(check.shape, int(check.example_tokens))
    for label, folder, seconds in evaluated:
        rate = generated_tokens(check.model, folder) / seconds if seconds else None
        print(f"| {label} | {rate:,.0f} | {mfu(flops, rate, check.peak):.2%} | {seconds:.0f} |" if rate else
              f"| {label} | failed: {why} | | |")  # fmt: skip


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2", help="model the steps train and evaluate")
    parser.add_argument("--model-shape", default=None, help="qwen2.5-3b, llama-3.1-8b or smollm2-135m, random weights")
    parser.add_argument("--shape-layers", type=positive_int, help="fewer layers than the shape (quick checks)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a toy run of every step")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated: " + ", ".join(SETTINGS))
    parser.add_argument("--out", default="outputs/gpu_check", help="folder for the runs and logs (its own replaced)")
    parser.add_argument("--overwrite", action="store_true", help="empty --out first, whoever wrote it")
    parser.add_argument("--sft-steps", type=positive_int, default=20)
    parser.add_argument("--max-length", type=positive_int, default=4096, help="packed sequence length")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="packed sequences per SFT step")
    parser.add_argument("--plain-steps", type=positive_int, default=5, help="timed steps of the plain loop (median)")
    parser.add_argument("--profile-steps", type=non_negative_int, default=3,
                        help="a baseline SFT run of this many steps, its last profiled (0: none)")  # fmt: skip
    parser.add_argument("--grpo-steps", type=positive_int, default=4)
    parser.add_argument("--grpo-batch", type=positive_int, default=8, help="prompts per GRPO step, x8 completions each")
    parser.add_argument("--grpo-micro-batch", type=positive_int, default=16, help="completions a GRPO forward")
    parser.add_argument("--completion-length", type=positive_int, default=256)
    parser.add_argument("--rollout-rounds", type=positive_int, default=3, help="rounds of perf/bench_rollouts.py")
    parser.add_argument("--queries", type=positive_int, default=64)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated, in this order: " + ", ".join(PARTS))
    parser.add_argument("--engines", default=",".join(ENGINES), help="GRPO's rows: " + ", ".join(ENGINES))
    args = parser.parse_args()
    for name, known in (("--parts", PARTS), ("--engines", ENGINES), ("--settings", tuple(SETTINGS))):
        if unknown := set(getattr(args, name[2:]).split(",")) - set(known):
            parser.error(f"{name}: unknown {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    return args


def main() -> None:
    args = parse_arguments()
    # rows reach the log as they are measured (piped output is block-buffered): a run a time limit stops keeps them
    sys.stdout.reconfigure(line_buffering=True)
    # JAX, where installed, is imported through the libraries and would claim 75 % of the GPU's memory up front
    # (on a lent H200 this process and the first SFT run held 139 GiB between them before training began)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import torch

    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        sys.exit("gpu-check needs a CUDA GPU (torch.cuda.is_available() is False); --device cpu runs a toy check")
    try:
        out = GrowingFolder((ROOT / args.out).resolve(), "gpu check", overwrite=args.overwrite)
    except RecTuneError as refused:
        sys.exit(f"gpu-check: {refused}")
    if not (DATA / "train.jsonl").is_file():
        run(["make", "-s", "data-demo", f"PY={sys.executable}", "STAMP="], out.entry("data.log"))

    model = args.model
    if args.model_shape:
        from perf.model_shapes import write_shape

        overrides = {"num_hidden_layers": args.shape_layers} if args.shape_layers else {}
        dtype = "bfloat16" if gpu else "float32"
        model = str(write_shape(args.model_shape, out.entry(f"shape-{args.model_shape}"), dtype=dtype, **overrides))
    peak = matmul_peak(args.device, size=8192 if gpu else 1024, repeats=10 if gpu else 3)
    shape, config = lora_shape(model, TARGETS)
    seq = mean_example_tokens(model)
    check = Check(args, out, {**os.environ, "WANDB_MODE": "disabled"}, model, peak, shape, config, seq,
                  lora_training_flops_per_token(shape, int(seq)))  # fmt: skip
    name = torch.cuda.get_device_name() if gpu else "CPU"
    print(f"{name}: matmul peak {peak / 1e12:.1f} TFLOP/s measured; model {model}: {shape.matmul_params / 1e9:.2f} B "
          f"matmul weights, {shape.lora_params / 1e6:.1f} M LoRA; examples {check.example_tokens:.0f} tokens "
          "on average")  # fmt: skip
    print(f"torch {torch.__version__}, transformers {version('transformers')}, trl {version('trl')}, "
          f"peft {version('peft')}, accelerate {version('accelerate')}")  # fmt: skip

    out.seal()
    parts = [part for part in args.parts.split(",") if part != "profile" or args.profile_steps]
    for part, measure in (("sft", sft_rows), ("grpo", grpo_rows), ("profile", profile_rows),
                          ("rollouts", rollout_rows), ("eval", eval_rows)):  # fmt: skip
        if part in parts:
            measure(check)
            out.seal()  # the kit's time limit may stop the check during the next part
    print(f"\nlogs and runs in {out.path}")


if __name__ == "__main__":
    main()
