"""RecTune's prompts are chats, a system message then the user's; a model's own tokenizer and chat template
render them.

Some templates take no system message and raise on one (Gemma's and Gemma 2's, older Mistral's): there the
system prompt opens the first user message, as those models' authors advise, in training and evaluation
alike. A tokenizer without any chat template (a base model) cannot render a chat: one line says what to give.
A template is a program its model's author wrote: each rendering has a time and a memory limit, so one that
loops without end or builds a string without bound stops in one line.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from rectune.core.io import DataError, RecTuneError, check_plain_files
from rectune.core.memory_limit import memory_limit
from rectune.core.time_limit import time_limit
from rectune.models.control_tokens import check_no_control_text, control_tokens
from rectune.models.model_folders import error_text

log = logging.getLogger(__name__)

FOLDED = "{model}: its chat template takes no system message; the system prompt opens the first user message"
PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
RENDER_TIME_S = 10.0  # a chat of RecTune's renders in milliseconds; Jinja's sandbox bounds no loop's length
RENDER_MEMORY_MIB = 1024  # ... and in kilobytes; nor what a loop builds


def render_chat(tokenizer: Any, messages: list[dict], model: str, **options: Any) -> str:
    """``messages`` as the tokenizer's chat template writes them (``apply_chat_template(tokenize=False)``),
    stopped in one line past :data:`RENDER_TIME_S` (two nested loops of Jinja's largest range ran for hours) or
    :data:`RENDER_MEMORY_MIB` of new address space (a string doubled in a loop grows until no memory is left)."""
    with (
        time_limit(RENDER_TIME_S, f"{model}: its chat template ran past {RENDER_TIME_S:.0f} s on one chat (a loop "
                   "without end?)"),
        memory_limit(RENDER_MEMORY_MIB * 2**20, f"{model}: its chat template asked for more than "
                     f"{RENDER_MEMORY_MIB} MiB on one chat (a string or list built without bound?)"),
    ):  # fmt: skip
        return tokenizer.apply_chat_template(messages, tokenize=False, **options)


def load_tokenizer(source: str) -> Any:
    """The tokenizer of ``source`` (a hub id, or a model or adapter folder); a folder holding none, or one that
    cannot be read, is one line (transformers' own is a traceback of a dozen lines)."""
    from transformers import AutoTokenizer

    folder = Path(source)
    if folder.is_dir():
        check_plain_files(folder)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise DataError(folder, "holds no tokenizer (no tokenizer.json or tokenizer_config.json); copy the "
                        "tokenizer files of the model it was trained from into it")  # fmt: skip
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as err:  # a local folder's files only: a cut tokenizer.json raises the tokenizers' own error
        if not folder.is_dir():
            raise
        raise DataError(folder, f"its tokenizer cannot be loaded: {error_text(err)}") from None
    limit = tokenizer.model_max_length  # compared with every text's length as it is tokenized: a TypeError there
    if not isinstance(limit, int | float) or isinstance(limit, bool):
        raise DataError(folder, f"its tokenizer_config.json sets model_max_length to {limit!r}, not a number")
    return tokenizer


def check_vocabulary(tokenizer: Any, rows: int | None, model: str) -> None:
    """Stop in one line when the tokenizer has token ids past the model's ``rows`` embeddings (None: unknown):
    tokenizer files copied from another model, where the first such id is an IndexError on a CPU and a
    device-side assert on a GPU."""
    last = max(tokenizer.get_vocab().values(), default=-1)
    if rows is not None and last >= rows:
        raise DataError(Path(model), f"its tokenizer has token ids up to {last}, but the model has {rows} token "
                        "embeddings: the tokenizer of another model?")  # fmt: skip


def configured_vocabulary(model: str) -> int | None:
    """The token embeddings a model folder's configuration makes (its ``vocab_size``), or None for a hub id or
    an adapter's folder."""
    from transformers import AutoConfig

    if not (Path(model) / "config.json").is_file():
        return None
    return getattr(AutoConfig.from_pretrained(model).get_text_config(), "vocab_size", None)


def check_chat_template(tokenizer: Any, model: str, hint: str = "an instruction-tuned model") -> None:
    """Stop in one line when the tokenizer has no chat template to render RecTune's prompts with: none, or named
    ones (``additional_chat_templates/``) without a ``default``, where transformers' ValueError came at the first
    prompt."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise RecTuneError(f"{model}: its tokenizer has no chat template (a base model?); give {hint}")
    if isinstance(template, dict) and not template.get("default"):
        names = ", ".join(sorted(map(str, template)))[:200]
        raise RecTuneError(f"{model}: its tokenizer has chat templates named {names} but no default one, which "
                           "RecTune renders its prompts with (chat_template.jinja)")  # fmt: skip


def takes_system_messages(tokenizer: Any, options: dict | None = None) -> bool:
    """Whether the tokenizer's chat template (with the variables ``options``) renders a system message (templates
    refuse with a TemplateError)."""
    from jinja2.exceptions import TemplateError

    try:
        name = getattr(tokenizer, "name_or_path", "the model")
        render_chat(tokenizer, PROBE, name, add_generation_prompt=True, **(options or {}))
    except TemplateError:
        return False
    return True


def fold_system(messages: list[dict]) -> list[dict]:
    """The system message's text opening the first user message (a blank line between), else as it was."""
    if not messages or messages[0]["role"] != "system":
        return messages
    system, rest = messages[0]["content"], messages[1:]
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}, *rest[1:]]
    return [{"role": "user", "content": system}, *rest]


def fitted(tokenizer: Any, prompts: list[list[dict]], model: str, options: dict | None = None) -> list[list[dict]]:
    """``prompts`` as the template takes them: folded (said in one line) where it takes no system message."""
    if takes_system_messages(tokenizer, options):
        return prompts
    log.warning(FOLDED.format(model=model))
    return [fold_system(prompt) for prompt in prompts]


def chat_control_tokens(tokenizer: Any, model: str, options: dict | None = None) -> list[str]:
    """The tokens that open and close the template's turns, and the text's begin and end tokens
    (:func:`~rectune.models.control_tokens.control_tokens`), read off a user's turn ready for the answer."""
    from jinja2.exceptions import TemplateError

    try:
        rendered = render_chat(tokenizer, PROBE[1:], model, add_generation_prompt=True, **(options or {}))
    except (TemplateError, RecTuneError):  # the renderings that follow say what is wrong with the template
        rendered = ""  # the begin and end tokens still count
    return control_tokens(tokenizer, rendered)


def check_examples_render(tokenizer: Any, examples: Any, model: str, name: str, options: dict | None = None) -> None:
    """Render each example as TRL will (its prompt ready for the answer, and with its completion where it has one;
    with the template's variables ``options``), each under :func:`render_chat`'s limits: TRL renders them with
    none, so a template that loops or grows without bound on some example stops here in one line naming it, not in
    TRL's tokenization or the OOM killer. A template that refuses an example is one line too (TRL's is a
    traceback). Where a prompt ready for the answer is not how the template begins the prompt with its answer,
    one line says what training leaves out (:data:`UNLIKE_EVALUATION`)."""
    from jinja2.exceptions import TemplateError

    unlike = None
    tokens = chat_control_tokens(tokenizer, model, options)
    for index, example in enumerate(examples):
        prompt, completion = example["prompt"], example.get("completion")
        if isinstance(prompt, str):
            continue  # plain text, which TRL tokenizes without the template
        chats = [(prompt, True)] if completion is None else [(prompt, True), (prompt + completion, False)]
        try:
            check_no_control_text([chats[-1][0]], tokens, model)
            texts = [render_chat(tokenizer, chat, model, add_generation_prompt=ends, **(options or {}))
                     for chat, ends in chats]  # fmt: skip
        except TemplateError as err:
            raise RecTuneError(f"{model}: its chat template refuses {name} example {index + 1}: {err}") from None
        except RecTuneError as err:  # an RFT example carries its query's id
            query = f" (query {example['id']})" if isinstance(example.get("id"), str) else ""
            raise RecTuneError(f"{name} example {index + 1}{query}: {err}") from None
        if unlike is None and len(texts) == 2 and not texts[1].startswith(texts[0]):
            unlike = index, _left_out(*texts)
    if unlike is not None:
        log.warning(UNLIKE_EVALUATION.format(model=model, name=name, index=unlike[0] + 1, text=unlike[1]))


# TRL starts a completion where the two renderings part (and warns once, among its other logs)
UNLIKE_EVALUATION = (
    "{model}: its chat template renders a prompt ready for the answer unlike the same prompt with its answer "
    "({name} example {index} first): training leaves out {text!r}, which evaluation's prompts end with, so the "
    "model learns its answers after another context than it is scored in; a chat_template_path whose prompt ends "
    "alike avoids it"
)


def _left_out(prompt: str, whole: str) -> str:
    """The end of ``prompt`` past the longest beginning it shares with ``whole``."""
    return prompt[len(os.path.commonprefix([prompt, whole])) :][:80]


def render_prompts(tokenizer: Any, prompts: list[list[dict]], model: str, options: dict | None = None) -> list[str]:
    """Each chat as the model's template writes it (:func:`fitted`), ready for the assistant's answer, with the
    template's variables ``options`` (``chat_template_kwargs``)."""
    from jinja2.exceptions import TemplateError

    check_chat_template(tokenizer, model)
    prompts = fitted(tokenizer, prompts, model, options)
    check_no_control_text(prompts, chat_control_tokens(tokenizer, model, options), model)
    try:
        return [render_chat(tokenizer, p, model, add_generation_prompt=True, **(options or {})) for p in prompts]
    except TemplateError as err:
        raise RecTuneError(f"{model}: its chat template refuses RecTune's prompts: {err}") from None
