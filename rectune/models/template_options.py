"""The variables a chat template is rendered with beyond the chat (``chat_template_kwargs``: Qwen3's
``enable_thinking``, say), kept from training to evaluation so a model is scored on prompts rendered as the
ones it learned from.

GRPO renders its prompts with the recipe's ``chat_template_kwargs``; the stage saves them beside its adapter
(:data:`TEMPLATE_OPTIONS_FILE`), and evaluation renders that checkpoint's prompts with them unless
``--chat-template-kwargs`` says otherwise. They are variables the template reads, never parameters of
``apply_chat_template`` itself: ``chat_template`` would render with a template the recipe wrote (a program, and
one no limit of RecTune's bounds), and ``add_generation_prompt`` or ``tokenize`` collide with the renderer's own
(a TypeError once the model has loaded and training has begun).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path
from typing import Any

from rectune.core.io import DataError, RecTuneError, read_json_object

TEMPLATE_OPTIONS_FILE = "chat_template_kwargs.json"  # beside adapter_config.json; only where there are any


def renderer_parameters() -> frozenset[str]:
    """The names ``apply_chat_template`` takes as its own parameters, not as the template's variables."""
    from transformers import PreTrainedTokenizerBase

    parameters = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters.values()
    return frozenset(p.name for p in parameters if p.kind is not p.VAR_KEYWORD) - {"self"}


def template_options_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a template's variables (None: it can): it must map names to JSON values, none of
    them one of ``apply_chat_template``'s own parameters."""
    if value is None:
        return None
    if isinstance(value, str):  # TRL parses a JSON object given as text; other text it leaves as it is
        return f"{value[:60]!r} is no JSON object of the template's variables"
    if not isinstance(value, dict):
        return f"a {type(value).__name__}, not a mapping of the template's variables to their values"
    for name in value:
        if not isinstance(name, str) or not name.isidentifier():
            return f"{name!r} is no name a template can read"
        if name in renderer_parameters():
            return (
                f"{name!r} is a parameter of apply_chat_template itself, not a variable its template reads (RecTune "
                "and TRL set it; a model's template is given by its tokenizer or SFT's chat_template_path)"
            )
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "holds a value that is not JSON (a date, a NaN)"
    return None


def check_template_options(value: Any, source: object) -> dict:
    """``value`` as the template's variables (``{}`` for None), else one line naming ``source``."""
    problem = template_options_problem(value)
    if problem:
        raise RecTuneError(f"{source}: key 'chat_template_kwargs': {problem}")
    return dict(value or {})


def template_options_argument(text: str) -> dict:
    """argparse type of ``--chat-template-kwargs``: a JSON object of the template's variables."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is no JSON object") from None
    problem = template_options_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def recorded_template_options(adapter: str | os.PathLike | None) -> dict:
    """The variables the stage that trained ``adapter`` rendered its prompts with (``{}`` where it saved none, or
    for a model that is no adapter of ours); a file of another shape is one line naming it."""
    path = Path(adapter) / TEMPLATE_OPTIONS_FILE if adapter else None
    if path is None or not path.is_file():
        return {}
    value = read_json_object(path)
    problem = template_options_problem(value)
    if problem:
        raise DataError(path, problem)
    return value
