"""How the trainer loads the model to train it: the dtype and attention kernel it asks ``from_pretrained`` for, and
what a recipe's ``model_init_kwargs`` may not ask.

Most of its keys shape the model (``dtype``, ``attn_implementation``, ``revision``, ``device_map``, a quantization,
overrides of the model's configuration) and transformers checks them. The ones here were tracebacks once the run
held its folder, or did what a recipe must not: write outside the run's folder or load pickle weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rectune.core.io import RecTuneError

KEY = "model_init_kwargs"
REFUSED = {
    "cache_dir": "would put downloaded models in a folder of the recipe's choosing, outside the run's; set HF_HOME",
    "offload_folder": "offloads weights to disk, outside the run's folder, where training cannot use them",
    "offload_state_dict": "offloads weights to disk, where training cannot use them",
    "offload_buffers": "offloads buffers, where training cannot use them",
    "proxies": "would send the Hub's requests through a server of the recipe's choosing",
    "output_loading_info": "makes from_pretrained return a tuple, not the model (an AttributeError)",
    "config": "replaces the model's configuration with another loaded by name (give model overrides as keys)",
    "generation_config": "is no setting of training (the rollouts' sampling: the recipe's own keys)",
    "state_dict": "replaces the model's weights with others",
    "adapter_kwargs": "loads an adapter into the base as it loads (SFT then RFT: init_adapter)",
    "adapter_name": "loads an adapter into the base as it loads (SFT then RFT: init_adapter)",
    "device_mesh": "is tensor parallelism's own wiring (launch with accelerate instead)",
    "distributed_config": "is tensor parallelism's own wiring (launch with accelerate instead)",
    "tp_plan": "is tensor parallelism's own wiring (launch with accelerate instead)",
    "tp_size": "is tensor parallelism's own wiring (launch with accelerate instead)",
    "key_mapping": "renames the checkpoint's weights as they load: a weight left unfilled starts at random",
    "kernel_config": "is an object transformers takes from Python, not a mapping (use_kernels alone takes the Hub's)",
    "torch_dtype": "is transformers' old name for 'dtype', which the run's own dtype overrides (give 'dtype')",
}
MAIN_ONLY = (
    "evaluation and merging load the base by name at the Hub's main revision; download this revision to a folder "
    "(hf download NAME --revision REV --local-dir DIR) and name the folder"
)
DTYPES = ("auto", "bfloat16", "float16", "float32")  # what TRL's model loading takes as text
NOT_TRAINABLE = ("meta", "disk")  # devices a device_map may name where no weight can be trained


def model_init_problem(kwargs: Any) -> str | None:
    """Why ``kwargs`` cannot load a model to train (None: as far as RecTune knows, they can)."""
    if not isinstance(kwargs, dict):
        return None  # a mapping's type is checked with the recipe's types; TRL parses JSON text into one
    for key, value in kwargs.items():
        if key in REFUSED:
            return f"{key!r} {REFUSED[key]}"
        if key == "revision" and value not in ("main", None):
            return f"'revision': {value!r}: {MAIN_ONLY}"
        if key == "dtype" and value is not None and value not in DTYPES:
            return f"'dtype': {value!r} is not one of {', '.join(DTYPES)}"
        if key == "weights_only" and value is not True:
            return f"'weights_only': {value!r} would unpickle .bin weights with all of pickle, which can run code"
        if key == "use_safetensors" and value not in (True, None):
            return f"'use_safetensors': {value!r} would load pickle weights (.bin), which can run code"
        devices = value.values() if key == "device_map" and isinstance(value, dict) else [value]
        if key == "device_map" and any(device in NOT_TRAINABLE for device in devices):
            return f"'device_map': {value!r} puts weights on the meta device or disk, where training cannot use them"
    return None


def check_model_init(configs: tuple[Any, ...], source: object) -> None:
    """Stop in one line naming ``source`` when a config's ``model_init_kwargs`` asks what training cannot do."""
    for config in configs:
        problem = model_init_problem(getattr(config, KEY, None))
        if problem:
            raise RecTuneError(f"{source}: key {KEY!r}: {problem}")


def keep_dtype_given(configs: tuple[Any, ...], given: set[str]) -> None:
    """ModelConfig's ``dtype`` stands where the recipe or command line gives it and a GPU trains; elsewhere it is
    None, the precision mode's (TRL's default, float32, would load a bf16 run's weights in fp32)."""
    import torch  # here, not at the top: a recipe is checked before torch loads

    for config in configs:
        names = {field.name for field in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else ()
        if "dtype" in names and ("dtype" not in given or not torch.cuda.is_available()):
            config.dtype = None


def set_model_init(training_args: Any, model_args: Any) -> None:
    """How the trainer loads the model: the dtype the recipe gives, else the precision mode's on a GPU and fp32 on
    a CPU, in bf16 too (rectune/training/cpu_precision.py); the attention kernel."""
    import torch

    precision = (torch.float32 if training_args.use_cpu else torch.bfloat16 if training_args.bf16
                 else torch.float16 if training_args.fp16 else torch.float32)  # fmt: skip
    training_args.model_init_kwargs = {
        "dtype": model_args.dtype or precision,
        "attn_implementation": model_args.attn_implementation,
        **(training_args.model_init_kwargs or {}),
    }


def quantization_config(training_args: Any, model_args: Any) -> Any:
    """TRL's bitsandbytes configuration for ModelConfig's ``load_in_4bit`` or ``load_in_8bit`` (None without),
    computing in the dtype the model loads in (TRL's would compute a bf16 run's 4-bit layers in fp32)."""
    from trl import get_quantization_config

    dtype = (training_args.model_init_kwargs or {}).get("dtype") or model_args.dtype
    return get_quantization_config(dataclasses.replace(model_args, dtype=dtype))


def keep_4bit_weights_trainable(model: Any) -> None:
    """Keep bitsandbytes from repacking a 4-bit base for CPU inference while it trains. On a CPU with AVX-512 BF16
    (Sapphire Rapids, Zen 4), bitsandbytes converts a 4-bit layer's weights, one way, into a packed inference format
    at the first forward in eval mode without gradients: RecTune's probe of the model's outputs before the first
    step, GRPO's rollouts. Every training forward after it failed (a bias added in place to a view of a leaf; a
    layer narrower than a quantization block, a reshape to width 0 at the probe itself)."""
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):  # bitsandbytes' Linear4bit: its switch for that format
            module.support_avx512bf16_for_cpu = False
