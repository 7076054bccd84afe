"""GPU memory for the paper recipes' models, computed from parameter counts (no activations).

Architectures as their model cards' config.json give them (hidden size, layers, attention and
key-value heads, MLP size, vocabulary, tied embeddings). LoRA: rank 16 on q, k, v, o, gate, up and
down projections, as in recipes/qwen3b_movie.yaml and recipes/perrec_mix.yaml.

Bytes per parameter: bf16 weights 2; LoRA's trainable parameters in fp32 with AdamW: weight 4, gradient
4, two moments 8 = 16; full fine-tuning with mixed precision AdamW: bf16 weight 2 + gradient 2 + fp32
master weight and two moments 12 = 16. ZeRO-2 shards gradients and optimizer state over the GPUs,
ZeRO-3 / FSDP also the weights. Activations come on top and grow with batch x sequence length
(gradient checkpointing trades them for compute).

    python -m perf.memory_estimate
"""

GIB = 1024**3
ARCHITECTURES = {
    # name: (hidden, layers, heads, kv_heads, intermediate, vocab, tied embeddings)
    "Qwen/Qwen2.5-3B-Instruct": (2048, 36, 16, 2, 11008, 151936, True),
    "meta-llama/Llama-3.1-8B-Instruct": (4096, 32, 32, 8, 14336, 128256, False),
}
LORA_RANK = 16


def parameter_counts(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int,
                     tied: bool) -> tuple[int, int]:  # fmt: skip
    """(all parameters, LoRA parameters) of a Llama/Qwen-style decoder (biases and norms are negligible)."""
    kv = hidden // heads * kv_heads
    shapes = {  # (in, out) of each projection LoRA adapts
        "q": (hidden, hidden), "k": (hidden, kv), "v": (hidden, kv), "o": (hidden, hidden),
        "gate": (hidden, intermediate), "up": (hidden, intermediate), "down": (intermediate, hidden),
    }  # fmt: skip
    per_layer = sum(i * o for i, o in shapes.values())
    total = layers * per_layer + vocab * hidden * (1 if tied else 2)
    lora = layers * sum(LORA_RANK * (i + o) for i, o in shapes.values())
    return total, lora


def training_step_bytes(
    config, batch: int, sequence: int, lora_params: int, *, weight_bytes: int = 2, checkpointing: bool = True,
    fused_loss: bool = False,
) -> float:  # fmt: skip
    """Peak bytes of one LoRA training step of a transformers ``config`` on ``batch`` x ``sequence`` tokens.

    Weights (``weight_bytes`` each: 2 in bf16, 4 in fp32), the adapters with AdamW (16 bytes each), what
    the layers keep for the backward pass per token (the layer inputs only under activation checkpointing,
    plus one layer recomputed; else every layer's saved tensors: two RMSNorms' input and output (4 hidden),
    attention's q, k and v after RoPE with the KV heads repeated, its output and o_proj's input (5 hidden),
    the MLP's gate, SiLU, up and down-input tensors (4 MLP widths)), and the output head's logits
    (``weight_bytes``) with the loss's fp32 copy (when not fp32 already), log-softmax and its gradient,
    unless a fused loss (Liger) never materialises them.
    """
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    total, _ = parameter_counts(hidden, layers, heads, kv_heads, config.intermediate_size, vocab,
                                bool(config.tie_word_embeddings))  # fmt: skip
    tokens = batch * sequence
    per_layer = (9 * hidden + 4 * config.intermediate_size) * weight_bytes
    if checkpointing:
        activations = tokens * (layers * hidden * weight_bytes + per_layer)
    else:
        activations = tokens * layers * per_layer
    upcast = 4 if weight_bytes != 4 else 0  # the loss computes in fp32
    logits = 0 if fused_loss else tokens * vocab * (weight_bytes + upcast + 4 + 4)
    return weight_bytes * total + 16 * lora_params + activations + logits


def main() -> None:
    print("| model | parameters | LoRA r16 parameters | LoRA, 1 GPU | full FT, 1 GPU | full FT ZeRO-2, 8 GPUs "
          "| full FT ZeRO-3/FSDP, 2 / 8 GPUs |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, architecture in ARCHITECTURES.items():
        total, lora = parameter_counts(*architecture)
        lora_gpu = (2 * total + 16 * lora) / GIB
        full = 16 * total / GIB
        zero2_8 = (2 * total + 14 * total / 8) / GIB  # bf16 weights replicated; the rest sharded
        zero3 = [full / n for n in (2, 8)]
        print(f"| {name} | {total / 1e9:.2f} B | {lora / 1e6:.1f} M | {lora_gpu:.1f} GiB | {full:.0f} GiB "
              f"| {zero2_8:.1f} GiB | {zero3[0]:.1f} / {zero3[1]:.1f} GiB |")  # fmt: skip


if __name__ == "__main__":
    main()
