"""Local generation through vLLM (``--backend vllm``): the checkpoint's model with its LoRA adapter served
unmerged, in batches of 256 prompts, answers in the order :func:`rectune.models.generation.generate` gives them.

vLLM serves one adapter on one model folder. An adapter trained on a base with other adapters merged in first
(SFT then RFT: the RFT adapter sits on the SFT model) is served on that merged model, the folder
``train/sft_base.py`` builds beside the SFT adapter; on the plain base its answers were another model's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rectune.core.io import RecTuneError, read_json_object
from rectune.models.answer_channels import decoded_answers, reasoning_template, uses_channels
from rectune.models.chat_format import (
    check_chat_template,
    check_vocabulary,
    configured_vocabulary,
    load_tokenizer,
    render_prompts,
)
from rectune.models.checkpoints import check_adapters_fit, generation_dtype, tokenizer_source
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.finite_outputs import non_finite_weight_error
from rectune.models.generation import IGNORED_SETTINGS, GenerationSettings, check_within, kept_generation_settings
from rectune.models.hub import check_model_available
from rectune.models.model_folders import check_weights
from rectune.models.sharing import merged_from
from rectune.models.weight_files import loaded_weight_files

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM sizes its LoRA slots for (max_lora_rank)
CHUNK = 256  # prompts a call: a progress bar per chunk, and answers written as each chunk ends
TRANSFORMERS_TOP_K = 50  # what generate samples from where a generation config sets no top_k (vLLM: every token)

log = logging.getLogger(__name__)


def vllm_model(checkpoint: Any) -> str:
    """The model folder (or hub id) vLLM loads for ``checkpoint``, checked as ``--backend hf`` checks what it loads
    (:func:`check_served`): its base, or for an adapter trained on merged ones the merged SFT base, when built from
    the SFT adapter as it is now; else one line saying how to build it. An adapter of a rank vLLM cannot serve is
    one line here too, as is one of a kind vLLM does not serve, before the report folder is claimed."""
    if checkpoint.adapter:
        check_adapter_kind(checkpoint.adapter)
        max_lora_rank(checkpoint.adapter)
    model = served_model(checkpoint)
    check_served(checkpoint, model)
    return model


def check_served(checkpoint: Any, model: str) -> None:
    """What ``--backend hf`` checks before its model loads, checked of ``model`` with ``checkpoint``'s adapter on
    it: the model folder (its files, configuration and weights' shapes), the tokenizer and its chat template and
    ids, the adapter's fit, and every weight finite. vLLM had started (minutes on a CPU) and then failed with its
    own traceback, hung on a FIFO among the weights, or answered NaN weights' noise."""
    check_model_available(model)
    source = tokenizer_source(checkpoint)
    tokenizer = load_tokenizer(source)
    check_chat_template(tokenizer, source)
    check_vocabulary(tokenizer, configured_vocabulary(model), source)
    if checkpoint.adapter:
        check_weights(checkpoint.adapter)
        check_adapters_fit(model, [checkpoint.adapter])
    _check_finite_weights(model, checkpoint.adapter)


def _check_finite_weights(model: str, adapter: str | None) -> None:
    """One line naming the first weight of the local ``model`` folder's (the files transformers would load) or
    the adapter's that holds NaN or inf: ``--backend hf`` finds it in the loaded model, vLLM would answer with it."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig

    sources = [(adapter, [Path(adapter) / "adapter_model.safetensors"])] if adapter else []
    if (Path(model) / "config.json").is_file():
        sources.append((model, loaded_weight_files(Path(model), AutoConfig.from_pretrained(model))[0]))
    for source, files in sources:
        for path in filter(Path.is_file, files):  # an adapter's pickle weights are refused where they are read
            with safe_open(path, "pt") as weights:
                names = weights.keys()
                for name in names:  # one tensor at a time: a 3B model's are gigabytes
                    tensor = weights.get_tensor(name)
                    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                        raise non_finite_weight_error(source, name)


def served_model(checkpoint: Any) -> str:
    """The model folder (or hub id) vLLM serves ``checkpoint``'s adapter on, unchecked (:func:`vllm_model`)."""
    if not checkpoint.merged:
        return checkpoint.base_model
    sft = Path(checkpoint.merged[-1])
    merged = sft / "merged"
    if (merged / "config.json").is_file() and merged_from(merged) == adapter_fingerprint(sft):
        return str(merged)
    state = "was built from an earlier version of that adapter" if merged.exists() else "is not built"
    raise RecTuneError(
        f"--backend vllm: {checkpoint.path} was trained on {sft} merged into its base, and vLLM serves one adapter "
        f"on a model folder; that model, {merged}, {state}: build it with `python train/sft_base.py {sft}` "
        "(or use --backend hf, which merges in memory)"
    )


def check_adapter_kind(adapter: str) -> None:
    """One line for an adapter of a kind vLLM does not serve (DoRA, the base layers' biases trained, whole modules
    saved beside LoRA's): vLLM refused it as it first answered, a traceback minutes after starting."""
    config = read_json_object(Path(adapter) / "adapter_config.json")
    unserved = [
        what
        for what, used in (
            ("DoRA (use_dora)", config.get("use_dora")),
            ("whole modules saved beside LoRA's (modules_to_save)", config.get("modules_to_save")),
            ("the base layers' biases trained (bias)", config.get("bias", "none") != "none"),
        )
        if used
    ]
    if unserved:
        raise RecTuneError(f"--backend vllm: {adapter}: vLLM serves no adapter with {unserved[0]}; use --backend hf")
    scaled = _scaled_otherwise(config)
    if scaled:
        raise RecTuneError(
            f"--backend vllm: {adapter}: its modules matching {scaled!r} are scaled by their own rank or alpha "
            "(rank_pattern, alpha_pattern), which vLLM does not read: it would scale them as the others; "
            "use --backend hf"
        )


def _patterns(config: dict, key: str) -> dict:
    """An adapter configuration's per-module mapping (``rank_pattern``, ``alpha_pattern``); one of another type
    counts as none here (PEFT says what it makes of it where the adapter is checked)."""
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _scaled_otherwise(config: dict) -> str | None:
    """The first module pattern whose LoRA scaling (alpha / r, or alpha / sqrt(r) under rsLoRA) differs from the
    adapter's own, which is the one vLLM applies to every module; None where there is none."""
    r, alpha = config.get("r"), config.get("lora_alpha")
    ranks, alphas = _patterns(config, "rank_pattern"), _patterns(config, "alpha_pattern")
    numbers = [r, alpha, *ranks.values(), *alphas.values()]
    if not all(isinstance(n, int | float) and not isinstance(n, bool) and n > 0 for n in numbers):
        return None  # PEFT refuses such a configuration where the adapter is checked (check_adapters_fit)
    root = math.sqrt if config.get("use_rslora") else float

    def scale(rank: float, value: float) -> float:
        return value / root(rank)

    for pattern in {**ranks, **alphas}:
        if not math.isclose(scale(ranks.get(pattern, r), alphas.get(pattern, alpha)), scale(r, alpha)):
            return pattern
    return None


def max_lora_rank(adapter: str) -> int:
    """The smallest LoRA rank vLLM sizes for that holds every rank of ``adapter`` (its ``r`` and ``rank_pattern``):
    vLLM refuses an adapter past its ``max_lora_rank``, 16 unless told."""
    config = read_json_object(Path(adapter) / "adapter_config.json")
    ranks = [config.get("r"), *_patterns(config, "rank_pattern").values()]
    highest = max((rank for rank in ranks if isinstance(rank, int) and not isinstance(rank, bool)), default=8)
    fitting = [rank for rank in LORA_RANKS if rank >= highest]
    if not fitting:
        raise RecTuneError(f"--backend vllm: {adapter}: LoRA rank {highest} is past the {LORA_RANKS[-1]} vLLM serves")
    return fitting[0]


def hf_decoding(base_model: str, settings: GenerationSettings) -> dict[str, Any]:
    """vLLM's ``SamplingParams`` that decode as ``--backend hf`` does: ``settings``, and what hf keeps of the base
    model's generation config (``kept_generation_settings``): its repetition penalty, greedy or not, and when
    sampling its ``top_k`` (transformers' 50 where it sets none; 0: every token) and ``min_p``.

    vLLM given sampling parameters takes none from the model folder: Qwen2.5-Instruct's repetition penalty of 1.05
    applied under hf only, and the two backends' greedy answers differed."""
    from transformers import GenerationConfig

    try:
        given = GenerationConfig.from_pretrained(base_model).to_diff_dict()
    except OSError:  # no generation_config.json: transformers' defaults, as for hf
        given = {}
    kept, dropped = kept_generation_settings(given)
    if dropped:
        log.warning(IGNORED_SETTINGS, base_model, ", ".join(dropped))
    values = {"max_tokens": settings.max_new_tokens, "repetition_penalty": kept.get("repetition_penalty") or 1.0}
    if not settings.do_sample:
        return {**values, "temperature": 0.0}
    top_k = kept.get("top_k")
    return {
        **values,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "top_k": TRANSFORMERS_TOP_K if top_k is None else top_k,
        "min_p": kept.get("min_p") or 0.0,
    }


def generate_vllm(
    checkpoint: Any, prompts: list[list[dict]], settings: GenerationSettings, *, model: str
) -> Iterator[list[tuple[int, str, dict]]]:
    """``[(prompt index, completion, {"finish_reason": ...}), ...]`` chunk by chunk, greedy unless sampling is
    asked for; ``model``: what :func:`vllm_model` chose (checked before the report folder is claimed).

    The prompts are rendered and tokenized as ``--backend hf`` renders them (the template under RecTune's limits,
    no special tokens added) and given to vLLM as token ids; prompts whose answers would pass the positions vLLM
    serves are one line before the first answer (vLLM cut such answers short, or raised mid-run)."""
    from transformers import AutoConfig
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    adapter = checkpoint.adapter
    lora = {"enable_lora": True, "max_lora_rank": max_lora_rank(adapter)} if adapter else {}
    source = tokenizer_source(checkpoint)  # the dtype and tokenizer --backend hf takes: both backends answer alike
    tokenizer = load_tokenizer(source)
    texts = render_prompts(tokenizer, prompts, model, settings.chat_template_kwargs or None)
    inputs = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    dtype = str(generation_dtype()).removeprefix("torch.")
    llm = LLM(model=model, tokenizer=source, dtype=dtype, seed=settings.seed, **lora)
    served = llm.llm_engine.model_config.max_model_len  # what the engine serves
    check_within(served, "positions vLLM serves (max_model_len)", model, [len(ids) for ids in inputs],
                 settings.max_new_tokens)  # fmt: skip
    params = SamplingParams(**hf_decoding(checkpoint.base_model, settings))
    request = LoRARequest("adapter", 1, adapter) if adapter else None
    model_type = AutoConfig.from_pretrained(checkpoint.base_model).model_type
    marked = reasoning_template(tokenizer, model_type) is not None or uses_channels(tokenizer)
    for start in range(0, len(inputs), CHUNK):
        chunk = [{"prompt_token_ids": ids} for ids in inputs[start : start + CHUNK]]
        outputs = llm.generate(chunk, params, lora_request=request, use_tqdm=True)
        answers = [out.outputs[0].text for out in outputs]
        if marked:  # vLLM's text drops the special tokens that mark the reasoning, and keeps the reasoning
            ids = [list(out.outputs[0].token_ids) for out in outputs]
            answers = decoded_answers(tokenizer, ids, texts[start : start + CHUNK], model_type)
        yield [
            (start + i, text, {"finish_reason": out.outputs[0].finish_reason})
            for i, (text, out) in enumerate(zip(answers, outputs, strict=True))
        ]
