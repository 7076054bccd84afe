"""FLOPs per token that a training or generation step really computes, for MFU figures comparable with others.

Dense training is usually counted as 6N per token (forward 2N, backward 4N: gradients of the activations
and of the weights). LoRA freezes the base weights, so their weight gradients are never computed:

    training FLOPs per token = 2 N  (forward)
                             + 2 N  (backward, activation gradients)
                             + 6 N_lora  (the adapters: forward, activation and weight gradients)
                             + 12 L s d_attn  (attention scores and their use, forward and backward)

N counts the weights used in matrix products (every linear layer and the output head; the input
embedding is a lookup), N_lora the adapters' weights, L the layers, s the sequence length attended over
and d_attn = heads x head dim. The attention term follows PaLM's convention (the full s x s product,
though a causal mask needs half); with packed sequences s is the length of each packed example, not
of the pack. Generation computes the forward only: 2 N + 4 L s d_attn per generated token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """What FLOPs depend on: weights in matrix products, adapter weights, layers and attention width."""

    matmul_params: int
    lora_params: int
    layers: int
    attention_width: int  # heads x head dim

    @classmethod
    def of(cls, model) -> Shape:
        """The shape of a transformers model (a PEFT model counts its adapters as ``lora_params``)."""
        import torch

        config = model.config
        matmul = lora = 0
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                if "lora_" in name:
                    lora += module.weight.numel()
                else:
                    matmul += module.weight.numel()
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(matmul, lora, config.num_hidden_layers, heads * head_dim)


def lora_training_flops_per_token(shape: Shape, sequence_length: int) -> float:
    """FLOPs per trained token of a LoRA step (see the module's formula)."""
    attention = 12 * shape.layers * sequence_length * shape.attention_width
    return 4 * shape.matmul_params + 6 * shape.lora_params + attention


def dense_training_flops_per_token(shape: Shape, sequence_length: int) -> float:
    """FLOPs per trained token when every weight trains (full fine-tuning)."""
    attention = 12 * shape.layers * sequence_length * shape.attention_width
    return 6 * (shape.matmul_params + shape.lora_params) + attention


def generation_flops_per_token(shape: Shape, context_length: int) -> float:
    """FLOPs per generated token with a KV cache: the forward pass over one token attending ``context_length``."""
    return 2 * (shape.matmul_params + shape.lora_params) + 4 * shape.layers * context_length * shape.attention_width


def mfu(flops_per_token: float, tokens_per_second: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the FLOP/s the model's work needs over the hardware's measured peak."""
    return flops_per_token * tokens_per_second / peak_flops


def matmul_peak(device: str, size: int = 8192, repeats: int = 10) -> float:
    """Measured matmul FLOP/s, the denominator of MFU: bf16 on a GPU, fp32 on the CPU (the mean of ``repeats``
    products)."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(2):
        a @ b
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work, so a timer around it measures the work (nothing to wait for on a CPU)."""
    if device == "cuda":
        __import__("torch").cuda.synchronize()


def lora_shape(model: str, targets: list[str], rank: int = 16) -> tuple[Shape, object]:
    """The shape of ``model`` (a name or folder) with rank-``rank`` adapters on ``targets``, and its config,
    built on the meta device (no weights are read)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from rectune.models.embedded import resolve_model_name

    config = AutoConfig.from_pretrained(resolve_model_name(model))
    with torch.device("meta"):
        network = get_peft_model(AutoModelForCausalLM.from_config(config), LoraConfig(r=rank, target_modules=targets))
    return Shape.of(network), config
