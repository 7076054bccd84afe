"""perf/memory_estimate.py's training-step estimate against a measured step, on the CPU, for small shapes.

Each case runs in a fresh process: PyTorch, transformers and PEFT imported, then the resident size
noted; a model of the shape (random fp32 weights, perf/model_shapes.py) with rank-16 adapters on every
projection, one AdamW step on ``batch`` x ``sequence`` tokens; the peak resident size minus the first
reading is the step's memory. On a GPU, `make gpu-check` compares the same estimate with
``torch.cuda.max_memory_allocated``. One run, one machine; the ratio is the figure.

    python -m perf.memory_check
"""

import json
import os
import subprocess
import sys

from perf.memory_estimate import GIB, training_step_bytes
from perf.model_shapes import shape_config

CASES = [  # (shape, overrides, batch, sequence, activation checkpointing)
    ("smollm2-135m", {}, 2, 512, False),
    ("smollm2-135m", {}, 2, 512, True),
    ("qwen2.5-3b", {"num_hidden_layers": 2}, 1, 512, False),
    ("llama-3.1-8b", {"num_hidden_layers": 1}, 1, 256, True),
]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

STEP = """
import json, resource, sys
import torch, transformers, peft
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from perf.model_shapes import shape_config

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

name, overrides, batch, sequence, checkpointing, targets = json.loads(sys.argv[1])
before = rss()
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(shape_config(name, **overrides), dtype=torch.float32)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets))
if checkpointing:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
ids = torch.randint(0, model.config.vocab_size, (batch, sequence))
model(input_ids=ids, labels=ids).loss.backward()
optimizer.step()
lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
print(json.dumps({"measured": rss() - before, "lora": lora}))
"""


def main() -> None:
    print("| shape | batch x sequence | checkpointing | measured | estimate | estimate / measured |")
    print("|---|---|---|---|---|---|")
    for name, overrides, batch, sequence, checkpointing in CASES:
        case = json.dumps([name, overrides, batch, sequence, checkpointing, TARGETS])
        # big blocks mmap-ed, so freed memory leaves the resident size (glibc would keep some for reuse)
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        result = subprocess.run([sys.executable, "-c", STEP, case], capture_output=True, text=True, check=True, env=env)
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        config = shape_config(name, **overrides)
        estimate = training_step_bytes(
            config, batch, sequence, figures["lora"], weight_bytes=4, checkpointing=checkpointing
        )  # fmt: skip
        layers = f" ({overrides['num_hidden_layers']} layers)" if overrides else ""
        measured = figures["measured"]
        print(f"| {name}{layers} | {batch} x {sequence} | {'on' if checkpointing else 'off'} "
              f"| {measured / GIB:.2f} GiB | {estimate / GIB:.2f} GiB | {estimate / measured:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
