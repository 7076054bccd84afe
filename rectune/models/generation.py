"""Batched generation: prompts sorted by length, left padding, greedy unless sampling is asked for, rows that
have finished no longer computed (rectune/models/finished_rows.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from rectune.core.io import RecTuneError
from rectune.models.answer_channels import decoded_answers
from rectune.models.chat_format import render_prompts
from rectune.models.model_folders import context_positions


@dataclass
class GenerationSettings:
    batch_size: int = 8
    max_new_tokens: int = 256
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()  # endpoints only
    chat_template_kwargs: dict = field(default_factory=dict)  # the template's variables (template_options.py)
    engine: str = ""  # the local engine where not transformers' generate ("vllm"): its answers are its own


def generate(
    model, tokenizer, prompts: list[list[dict]], settings: GenerationSettings, desc: str = "generating"
) -> Iterator[list[tuple[int, str, dict]]]:
    """Yield ``[(prompt index, completion, {"finish_reason": ...}), ...]`` batch by batch, longest prompts first.

    The finish reason is OpenAI's: ``"stop"`` when the answer ended with an end-of-sequence token,
    ``"length"`` when it used all ``max_new_tokens`` and may be cut short.

    Sorting by length keeps padding small; the longest batch comes first so running out of
    memory shows at once, not at the end. The progress bar shows one estimate, the most the rest can
    take (:func:`time_left_bound`, measured on the batches so far), not tqdm's, which extrapolates from
    batches whose answers may have ended early.
    """
    import torch  # here, not at the top: the settings and endpoints import this module without torch

    from rectune.models.finished_rows import skipping_finished_rows

    texts = render_prompts(
        tokenizer, prompts, getattr(model, "name_or_path", "the model"), settings.chat_template_kwargs
    )
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    check_positions(model, lengths, settings.max_new_tokens)
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    stops = torch.tensor(sorted(end_token_ids(model)), dtype=torch.long)
    torch.manual_seed(settings.seed)
    with tqdm(total=len(order), desc=desc, unit="query", bar_format=BAR_FORMAT) as progress:
        for start in range(0, len(order), settings.batch_size):
            indices = order[start : start + settings.batch_size]
            batch = tokenizer([texts[i] for i in indices], return_tensors="pt", padding=True, add_special_tokens=False)
            batch = batch.to(model.device)
            sampling = {"temperature": settings.temperature, "top_p": settings.top_p} if settings.do_sample else {}
            options = {"max_new_tokens": settings.max_new_tokens, "do_sample": settings.do_sample,
                       "pad_token_id": tokenizer.pad_token_id, **sampling}  # fmt: skip
            started = time.perf_counter()
            with torch.no_grad(), skipping_finished_rows(model, len(indices), options) as options:
                output = model.generate(**batch, **options)
            new_tokens = output[:, batch["input_ids"].shape[1] :]
            prompts_of_batch = [texts[i] for i in indices]
            completions = decoded_answers(tokenizer, new_tokens, prompts_of_batch, model.config.model_type)
            ended = torch.isin(new_tokens.cpu(), stops).any(dim=1).tolist()
            per_step = (time.perf_counter() - started) / max(new_tokens.shape[1], 1)
            left = time_left_bound(per_step, len(order) - start - len(indices), settings)
            progress.set_postfix_str(
                f"at most {tqdm.format_interval(left)} left at {settings.max_new_tokens} tokens an answer",
                refresh=False,
            )
            progress.update(len(indices))
            reasons = [{"finish_reason": "stop" if end else "length"} for end in ended]
            yield list(zip(indices, completions, reasons, strict=True))


def check_positions(model, lengths: list[int], max_new_tokens: int) -> None:
    """Stop in one line, before the first batch, when prompts and their answers would pass the model's positions
    (:func:`context_positions`): past GPT-2's learned 1,024 the batch was an IndexError mid-run, and a megabyte
    prompt to a rotary model ran out of memory, blamed on the batch size."""
    limit, kind = context_positions(model) or (None, "")
    check_within(limit, kind, getattr(model, "name_or_path", "the model"), lengths, max_new_tokens)


def check_within(limit: int | None, kind: str, name: str, lengths: list[int], max_new_tokens: int) -> None:
    """One line when prompts of ``lengths`` tokens with their answers pass ``limit`` positions (None: no limit)."""
    over = [n for n in lengths if limit is not None and n + max_new_tokens > limit]
    if over:
        raise RecTuneError(
            f"{name}: {len(over)} of {len(lengths)} prompts with their "
            f"{max_new_tokens} new tokens pass its {limit} {kind} (the longest prompt has {max(over)} "
            "tokens); lower --max-new-tokens, shorten the prompts, or use a model with a longer context"
        )


# What a checkpoint's generation_config.json may set: its special tokens and the sampling defaults vLLM also
# takes from it (Qwen's repetition_penalty, say). Anything else there (beam search, several sequences a
# prompt, a clock, stop strings, assisted, contrastive or custom decoding) would change what is generated or
# break the contract above: one answer a prompt, ended by an end token or the token limit.
FROM_MODEL_FOLDER = (
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "do_sample", "temperature", "top_k",
    "top_p", "min_p", "repetition_penalty", "max_length", "max_new_tokens",
)  # fmt: skip
# How, not what, is generated, dropped without a word (Gemma 2's cache_implementation, say); outputs asked for
# as dictionaries would not be the tensor of tokens the callers read
QUIET = (
    "transformers_version", "_from_model_config", "cache_implementation", "use_cache", "output_attentions",
    "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
)  # fmt: skip


def one_answer_a_prompt(model) -> list[str]:
    """Keep only :data:`FROM_MODEL_FOLDER` of the model's generation config (a PEFT model's base model's, which
    ``generate`` reads); return what it dropped (``"num_beams 4"``) for the caller's one line, so a model
    folder never changes silently what is generated."""
    from transformers import GenerationConfig

    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    kept, dropped = kept_generation_settings(target.generation_config.to_diff_dict())
    target.generation_config = GenerationConfig(**kept)
    return dropped


IGNORED_SETTINGS = "%s: its generation_config.json asks for %s; ignored: one answer a query"  # a log line's format


def kept_generation_settings(given: dict) -> tuple[dict, list[str]]:
    """What local generation keeps of a generation config's settings (``to_diff_dict()``'s):
    :data:`FROM_MODEL_FOLDER` with values ``generate`` takes; and what it drops, named (``"num_beams 4"``)."""
    dropped = [f"{key} {value!r}" for key, value in given.items() if key not in (*FROM_MODEL_FOLDER, *QUIET)]
    kept = {key: given[key] for key in FROM_MODEL_FOLDER if key in given}
    dropped += [f"{key} {value!r} (no value generate takes)" for key, value in kept.items() if not _takes(key, value)]
    return {key: value for key, value in kept.items() if _takes(key, value)}, dropped


def is_token_id(value: object) -> bool:
    """Whether ``value`` can name a token: a whole number of at least 0 (``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _takes(key: str, value: object) -> bool:
    """Whether ``generate`` takes this value of a kept setting: a repetition penalty of 0 or a token id that is
    no whole number would raise mid-run, at the first batch."""
    if value is None:
        return True
    if key.endswith("token_id"):
        ids = value if isinstance(value, list) else [value]
        return bool(ids) and all(map(is_token_id, ids))
    if key == "do_sample":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if key in ("max_length", "max_new_tokens", "top_k"):
        return isinstance(value, int) and value >= (0 if key == "top_k" else 1)
    if key in ("top_p", "min_p"):
        return 0 <= value <= 1
    return value > 0  # temperature, repetition_penalty


def end_token_ids(model) -> set[int]:
    """The tokens ``generate`` stops an answer at: the generation config's, one id or several (none: every
    answer runs to ``max_new_tokens``)."""
    configured = model.generation_config.eos_token_id
    return {i for i in (configured if isinstance(configured, list) else [configured]) if i is not None}


BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"  # tqdm's less its ETA


def time_left_bound(seconds_per_step: float, queries_left: int, settings: GenerationSettings) -> float:
    """The longest the remaining queries can take: every batch decoding ``max_new_tokens`` steps at the
    measured cost of a step. Later batches hold shorter prompts (longest first), so their steps cost no
    more; an answer that stops early only makes the rest quicker."""
    return seconds_per_step * settings.max_new_tokens * math.ceil(queries_left / settings.batch_size)
