"""The anchor row of every GPU training table: a plain PyTorch + PEFT loop at the same shape and batch.

No trainer, data loader, packing or metrics: random token batches of ``batch_size`` x ``max_length``, the
decoder's forward (SDPA), cross-entropy over the next tokens computed in chunks of ``chunk`` positions
and recomputed in the backward (no full logits kept, as RecTune's training path keeps none), AdamW on the
rank-16 LoRA parameters of every projection (with the SFT runs' dropout), activation checkpointing as
asked. With ``document_tokens`` each row holds documents of that many tokens, their positions restarting
at each one, so transformers masks attention to each document as it does for RecTune's packed batches
(a block-diagonal mask, which SDPA cannot give its causal flash kernel); without, each row is one
causal sequence. The figure is the median of ``steps`` timed steps after ``warmup``. ``perf/gpu_check.py`` runs it
in its own process beside RecTune's SFT runs, so each table says how much of what the device gives a lean
loop RecTune gets.

    python -m perf.plain_loop --model embedded:smollm2 --device cpu --batch-size 1 --max-length 512
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from dataclasses import dataclass

from perf.flops import synchronize

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class LoopFigures:
    tokens_per_second: float
    seconds_per_step: float
    peak_gib: float  # GPU: peak allocated; CPU: the process's peak resident memory
    loss: float  # the last step's, near log(vocabulary) on random tokens


def chunked_cross_entropy(hidden, targets, head, chunk: int):
    """Mean next-token cross-entropy of ``hidden`` (positions x width) against ``targets``; each chunk's
    logits are recomputed in the backward instead of kept."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    def chunk_loss(h, t):
        return F.cross_entropy(head(h).float(), t, reduction="sum")

    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk):
        end = start + chunk
        total = total + checkpoint(chunk_loss, hidden[start:end], targets[start:end], use_reentrant=False)
    return total / targets.numel()


def plain_loop(
    model: str,
    device: str,
    batch_size: int,
    max_length: int,
    *,
    checkpointing: bool = True,
    lora_dropout: float = 0.0,
    steps: int = 5,
    warmup: int = 2,
    chunk: int = 4096,
    document_tokens: int | None = None,
) -> LoopFigures:
    """Train LoRA on ``model`` for ``warmup + steps`` steps of random tokens; the timed steps' figures."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rectune.models.embedded import resolve_model_name

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    network = AutoModelForCausalLM.from_pretrained(resolve_model_name(model), dtype=dtype, attn_implementation="sdpa")
    network.to(device)
    if checkpointing:
        network.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        network.enable_input_require_grads()
    adapters = LoraConfig(r=16, lora_alpha=32, lora_dropout=lora_dropout, target_modules=TARGETS)
    network = get_peft_model(network, adapters)
    network.train()
    optimizer = torch.optim.AdamW([p for p in network.parameters() if p.requires_grad], lr=1e-4)
    decoder, head = network.get_base_model().get_decoder(), network.get_output_embeddings()
    generator = torch.Generator().manual_seed(0)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, loss = [], None
    positions = None
    if document_tokens:
        positions = (torch.arange(max_length, device=device) % document_tokens).expand(batch_size, -1)
    for _ in range(warmup + steps):
        ids = torch.randint(0, network.config.vocab_size, (batch_size, max_length), generator=generator).to(device)
        synchronize(device)
        start = time.perf_counter()
        hidden = decoder(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
        width = hidden.shape[-1]
        loss = chunked_cross_entropy(hidden[:, :-1].reshape(-1, width), ids[:, 1:].reshape(-1), head, chunk)
        loss.backward()
        loss = loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times[warmup:])
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    del network, optimizer
    if device == "cuda":
        torch.cuda.empty_cache()
    return LoopFigures(batch_size * max_length / seconds, seconds, peak, loss.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--no-checkpointing", action="store_true")
    parser.add_argument("--lora-dropout", type=float, default=0.0)
    parser.add_argument("--document-tokens", type=int, default=None, help="documents of this length, masked apart")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    figures = plain_loop(args.model, args.device, args.batch_size, args.max_length,
                         checkpointing=not args.no_checkpointing, lora_dropout=args.lora_dropout,
                         steps=args.steps, document_tokens=args.document_tokens)  # fmt: skip
    print(f"plain loop: {figures.tokens_per_second:,.0f} tokens/s, {figures.seconds_per_step:.2f} s a step, "
          f"peak {figures.peak_gib:.1f} GiB, loss {figures.loss:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
