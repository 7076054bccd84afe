"""What GRPO's ``generation_kwargs`` may set: how each token of a rollout is sampled, and nothing else.

TRL hands them to transformers' ``GenerationConfig`` for every rollout, over the recipe's own sampling settings.
Anything but sampling changes what a rollout is, and each such key was a traceback at the first step, once the model
had loaded and the run held its folder: several beams or sequences a row (``num_beams``, ``num_return_sequences``),
outputs as dictionaries (``return_dict_in_generate``), stop strings (generate needs the tokenizer for them, which
TRL does not pass), assisted, prompt-lookup, contrastive or DoLa decoding, a watermark, another cache (RecTune's
rollouts manage theirs), token ids past the vocabulary. Others ran and broke the group silently: greedy decoding
(``do_sample: false``: every completion of a group alike, no advantage to learn from), a clock (``max_time``:
rollouts that depend on the machine's speed), other lengths or end tokens than the recipe's
(``max_new_tokens``, ``min_new_tokens``, ``eos_token_id``). With ``use_vllm`` they go to vLLM's
``SamplingParams``, whose names differ, and are not checked here.
"""

from __future__ import annotations

import math
from typing import Any

from rectune.core.io import RecTuneError
from rectune.training.recipe_values import inside

KEY = "generation_kwargs"


# key -> the interval its value must lie in; WHOLE ones take whole numbers, FLAGS true or false; token id lists
# (TOKEN_LISTS) are checked against the model's vocabulary
SAMPLING = {
    "temperature": "(0, inf)", "top_k": "[0, inf)", "top_p": "(0, 1]", "min_p": "[0, 1]", "typical_p": "(0, 1]",
    "epsilon_cutoff": "[0, 1)", "eta_cutoff": "[0, 1)", "repetition_penalty": "(0, inf)",
    "no_repeat_ngram_size": "[0, inf)",
}  # fmt: skip
WHOLE = ("top_k", "no_repeat_ngram_size")
FLAGS = ("renormalize_logits", "remove_invalid_values")
TOKEN_LISTS = {"suppress_tokens": 1, "begin_suppress_tokens": 1, "bad_words_ids": 2}  # key -> nesting depth


def generation_kwargs_problem(kwargs: Any, vocabulary: int | None) -> str | None:
    """Why ``kwargs`` cannot shape GRPO's rollouts (None: they can); ``vocabulary``: the model's token count, where
    known."""
    if kwargs is None:
        return None
    if not isinstance(kwargs, dict):
        return f"a {type(kwargs).__name__}, not a mapping of sampling settings to values"
    allowed = ", ".join([*SAMPLING, *FLAGS, *TOKEN_LISTS])
    for key, value in kwargs.items():
        if key in SAMPLING:
            problem = number_problem(value, SAMPLING[key], key in WHOLE)
        elif key in FLAGS:
            problem = None if isinstance(value, bool) else f"{value!r} is not true or false"
        elif key in TOKEN_LISTS:
            problem = _token_ids_problem(value, TOKEN_LISTS[key], vocabulary)
        else:
            return (
                f"{key!r} would change what a rollout is, not how its tokens are sampled (it takes {allowed}; "
                "lengths and end tokens have keys of their own: max_completion_length, the tokenizer's)"
            )
        if problem:
            return f"{key!r}: {problem}"
    return None


def number_problem(value: Any, interval: str, whole: bool) -> str | None:
    """Why ``value`` is not a (``whole``) number in ``interval``, such as ``"(0, 1]"`` (None: it is)."""
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        return f"{value!r} is not a {'whole ' if whole else ''}number"
    if not math.isfinite(value) or not inside(value, interval):
        return f"{value!r} must lie in {interval}"
    return None


def _token_ids_problem(value: Any, depth: int, vocabulary: int | None) -> str | None:
    from rectune.models.generation import is_token_id  # here: the scripts answer --help before torch loads

    lists = value if depth == 2 and isinstance(value, list) else [value]
    for ids in lists:
        if not isinstance(ids, list) or not ids and depth == 2:
            return f"{value!r} is not a list of {'non-empty lists of ' if depth == 2 else ''}token ids"
        for token in ids:
            if not is_token_id(token):
                return f"{token!r} is no token id"
            if vocabulary is not None and token >= vocabulary:
                return f"token id {token} is past the model's {vocabulary} tokens"
    return None


def check_generation_kwargs(config: Any, vocabulary: int | None, source: object) -> None:
    """Stop in one line naming ``source`` (the recipe or the command line) when GRPO's ``generation_kwargs`` would do
    more than shape sampling, before the run claims its folder."""
    if getattr(config, "use_vllm", False):
        return
    problem = generation_kwargs_problem(getattr(config, KEY, None), vocabulary)
    if problem:
        raise RecTuneError(f"{source}: key {KEY!r}: {problem}")
