"""The precision a run trains in without a GPU: fp32, or bf16 where the recipe asks and the CPU computes it.

TRL's configs default to ``bf16: true``, which a CPU run takes as an order it cannot always keep: on a CPU
with AVX2 only, bfloat16 is emulated (a bfloat16 copy of SmolLM2 sampled a GRPO step's completions 4x slower
than the float32 policy, measured). So without a GPU RecTune trains in fp32 unless the recipe or the command
line itself says ``bf16: true`` and the CPU has bfloat16 instructions (AVX-512 BF16 or AMX, as oneDNN
decides). Then the forward runs under bf16 autocast over fp32 weights (model_init_kwargs.set_model_init), so
the residual stream stays fp32, and GRPO samples from a bfloat16 copy of the merged policy unless the recipe
sets ``rollout_dtype`` (rectune/training/rollouts.py). On the 2-core AVX-512 BF16 machine
(``make bench-cpu-precision``, docs/measured-figures.md) that made 1.78x the GRPO prompts a minute and 1.38x
the SFT tokens/s of fp32; bfloat16 weights, as on a GPU, were no faster (1.65x, 1.31x in another run) and their
LoRA gradients a little further from fp32's.
"""

from __future__ import annotations

import argparse
from typing import Any

CPU_ALWAYS = {"fp16": False, "use_cpu": True}  # fp16 autocast has no fast CPU kernels; use_cpu: see recipes.py


def cpu_has_bfloat16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX-512 BF16 or AMX, as oneDNN decides)."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def bf16_asked(args: list[str], recipe: dict[str, Any]) -> bool:
    """Whether the command line (``--bf16 true``, ``--bf16=yes``; ``--no_bf16`` says no) or else the
    recipe (``bf16: true``) asks for bf16. TRL's default does not count. A value that is no boolean is left to
    the full parse, which refuses it in one line."""
    from transformers.hf_argparser import string_to_bool  # as HfArgumentParser reads a boolean flag

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--bf16", type=string_to_bool, default=None)
    parser.add_argument("--no_bf16", "--no-bf16", dest="bf16", action="store_false")

    def leave_it(message: str) -> None:
        raise ValueError(message)

    parser.error = leave_it
    try:
        given = parser.parse_known_args(args)[0].bf16
    except ValueError:
        return False
    return given if given is not None else recipe.get("bf16") is True


def cpu_precision(asked: bool, has_bfloat16: bool) -> tuple[dict[str, bool], str]:
    """The training arguments a CPU run gets (``bf16``, ``fp16``, ``use_cpu``) and the line that says why."""
    if asked and has_bfloat16:
        return {**CPU_ALWAYS, "bf16": True}, "training on CPU in bf16 (asked, and this CPU has bfloat16 instructions)"
    if asked:
        why = "bf16: true asked, but this CPU has no bfloat16 instructions (emulated, it would be slower than fp32)"
        return {**CPU_ALWAYS, "bf16": False}, f"training on CPU in fp32: {why}"
    return {**CPU_ALWAYS, "bf16": False}, "training on CPU in fp32"
