"""The answer in a model's new tokens where its reasoning is marked by special tokens.

Answers are decoded without special tokens. Most chat models write their reasoning as text (``<think>…</think>``,
removed where answers are read: :func:`rectune.data.completions.answer_text`). Some mark it with special tokens,
which that decoding drops while keeping the reasoning:

* Gemma 4 writes ``<|channel>thought\\n…reasoning…<channel|>Heat [SEP] Ronin<turn|>``, decoded
  ``thought\\n…reasoning…Heat [SEP] Ronin``;
* gpt-oss writes OpenAI's harmony format, ``<|channel|>analysis<|message|>…reasoning…<|end|><|start|>assistant
  <|channel|>final<|message|>Heat [SEP] Ronin<|return|>``, decoded ``analysis…reasoning…assistantfinalHeat [SEP]
  Ronin``.

Either way the reasoning's titles were scored as the answer's. Such a model's answer is read as ``transformers
serve`` reads it: the ``content`` its response template (transformers' parser; the tokenizer's own, else the one
transformers keeps for its model type) finds in the output decoded with its special tokens. A harmony tokenizer
without a template gets its final channel's message. An output with no answer in it (generation stopped while
reasoning) answers ``""``, as an unclosed ``<think>`` is read.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from rectune.models.control_tokens import special_tokens

CHANNEL, MESSAGE = "<|channel|>", "<|message|>"
_FINAL = re.compile(
    r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?:<\|(?:return|end|call)\|>|$)", re.DOTALL
)
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # the names transformers' templates give it


def reasoning_template(tokenizer: Any, model_type: str | None) -> dict | None:
    """The response template of a model whose reasoning opens with a special token (else None: its answers decode
    as they are): the tokenizer's ``response_template``, else transformers' for ``model_type``."""
    from transformers.cli.serving.utils import get_response_template

    # get_response_template reads a model's config.model_type only
    template = get_response_template(tokenizer, SimpleNamespace(config=SimpleNamespace(model_type=model_type)))
    fields = template.get("fields", {}) if isinstance(template, dict) else {}
    opens = [str(fields[name].get("open", "")) + str(fields[name].get("open_pattern", ""))
             for name in REASONING_FIELDS if isinstance(fields.get(name), dict)]  # fmt: skip
    specials = special_tokens(tokenizer)
    return template if any(token in marker for marker in opens for token in specials) else None


def uses_channels(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` writes harmony's channels as special tokens (gpt-oss)."""
    specials = special_tokens(tokenizer)
    return CHANNEL in specials and MESSAGE in specials


def decoded_answers(
    tokenizer: Any, sequences: Any, prompts: list[str] | None = None, model_type: str | None = None
) -> list[str]:
    """Each sequence of new token ids (``prompts``: the rendered prompt of each) as its answer's text."""
    plain = tokenizer.batch_decode(sequences, skip_special_tokens=True)
    template = reasoning_template(tokenizer, model_type)
    if template is None and not uses_channels(tokenizer):
        return plain
    answers = []
    for i, ids in enumerate(sequences):
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        while ids and ids[-1] == tokenizer.pad_token_id:  # padding after the end: the parser reads it as content
            ids.pop()
        raw = tokenizer.decode(ids, skip_special_tokens=False)
        if template is not None:
            answers.append(_content(tokenizer, raw, template, prompts[i] if prompts else ""))
        else:
            answers.append(final_message(raw, tokenizer) if CHANNEL in raw else plain[i])
    return answers


def _content(tokenizer: Any, raw: str, template: dict, prompt: str) -> str:
    try:
        parsed = tokenizer.parse_response(raw, template, prefix=prompt)
    except Exception:  # an output the template cannot parse: no answer, rather than its reasoning as one
        return ""
    content = parsed.get("content") if isinstance(parsed, dict) else None
    return content if isinstance(content, str) else ""


def final_message(text: str, tokenizer: Any) -> str:
    """The last final-channel message of ``text`` (decoded with its special tokens), less any special token left in
    it; ``""`` where it has none."""
    found = list(_FINAL.finditer(text))
    if not found:
        return ""
    answer = found[-1].group(1)
    for token in special_tokens(tokenizer):
        answer = answer.replace(token, "")
    return answer
