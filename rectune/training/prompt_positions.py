"""GRPO's prompts against the positions its rollouts may take: the model's, or a colocated vLLM's where it serves
fewer. Checked before the first step: past GPT-2's learned 1,024 the rollout was an IndexError, a megabyte prompt
ran out of memory, and a colocated vLLM refused a longer prompt at the step that drew it."""

from __future__ import annotations

from typing import Any

from rectune.core.io import RecTuneError
from rectune.models.chat_format import load_tokenizer, render_chat

VLLM_POSITIONS = "positions a colocated vLLM serves (vllm_max_model_length)"


def check_prompts_fit(
    model_name: str, positions: tuple | None, completion_length: int | None, *datasets: Any, options: dict | None = None
) -> None:
    """Stop in one line, before the first step, where GRPO's prompts (with the template's variables ``options``) with
    ``completion_length`` new tokens would pass the model's ``positions`` (``(number, what sets them)``): past GPT-2's
    learned 1,024 the rollout was an IndexError, and a megabyte prompt ran out of memory. TRL has no prompt limit."""
    if positions is None:
        return
    tokenizer = load_tokenizer(model_name)
    new_tokens = completion_length or 0
    # as TRL tokenizes them, in batches: only a plain prompt gets special tokens (a chat template writes its own)
    prompts = [prompt for data in datasets if data is not None for prompt in data["prompt"]]
    chats = [render_chat(tokenizer, prompt, model_name, add_generation_prompt=True, **(options or {}))
             for prompt in prompts if not isinstance(prompt, str)]  # fmt: skip
    lengths = [len(ids) for texts, special in (([p for p in prompts if isinstance(p, str)], True), (chats, False))
               if texts for ids in tokenizer(texts, add_special_tokens=special)["input_ids"]]  # fmt: skip
    over = [n for n in lengths if n + new_tokens > positions[0]]
    if over:
        remedy = "raise vllm_max_model_length, " if positions[1] == VLLM_POSITIONS else ""
        raise RecTuneError(
            f"recipe key 'max_completion_length': {len(over)} of {len(lengths)} prompts with their {new_tokens} new "
            f"tokens pass the {positions[0]} {positions[1]} of {model_name} (the longest prompt has {max(over)} "
            f"tokens); {remedy}lower max_completion_length, shorten the prompts, or use a model with a longer context"
        )


def rollout_positions(training_args: Any, positions: tuple | None) -> tuple | None:
    """The positions GRPO's rollouts may take: the model's (``context_positions``), or fewer where a colocated vLLM
    serves fewer (``vllm_max_model_length``): vLLM refused a longer prompt at the step that drew it, and ended a
    completion at its last position without a word. A vLLM server's own length is not known here."""
    served = training_args.vllm_max_model_length
    if not (training_args.use_vllm and training_args.vllm_mode == "colocate" and served):
        return positions
    if positions is not None and positions[0] <= served:
        return positions
    return served, VLLM_POSITIONS
