"""The answer in a model's new tokens where its tokenizer marks the reasoning with special tokens.

Answers are decoded without special tokens. Most chat models write their reasoning as text (``<think>…</think>``,
removed where answers are read: :func:`rectune.data.completions.answer_text`), but OpenAI's gpt-oss models write
the harmony format, whose channels are special tokens::

    <|channel|>analysis<|message|>…reasoning…<|end|>
    <|start|>assistant<|channel|>final<|message|>Heat [SEP] Ronin<|return|>

Decoded without its special tokens that is ``analysis…reasoning…assistantfinalHeat [SEP] Ronin``: one answer whose
reasoning's titles count as recommendations and whose first title reads ``assistantfinalHeat``. Where the
tokenizer has harmony's tokens, the answer is the final channel's message, and ``""`` where generation stopped
before it (as an unclosed ``<think>`` is read: the model never reached an answer).
"""

from __future__ import annotations

import re
from typing import Any

CHANNEL, MESSAGE = "<|channel|>", "<|message|>"
_FINAL = re.compile(
    r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?:<\|(?:return|end|call)\|>|$)", re.DOTALL
)


def uses_channels(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` writes harmony's channels as special tokens (gpt-oss)."""
    special = {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}
    return CHANNEL in special and MESSAGE in special


def decoded_answers(tokenizer: Any, sequences: Any) -> list[str]:
    """Each sequence of new token ids as its answer's text: decoded without special tokens, or, for a tokenizer
    that :func:`uses_channels`, its final channel's message where it writes channels (``""`` where it has no
    final one)."""
    plain = tokenizer.batch_decode(sequences, skip_special_tokens=True)
    if not uses_channels(tokenizer):
        return plain
    raw = tokenizer.batch_decode(sequences, skip_special_tokens=False)
    pairs = zip(raw, plain, strict=True)
    return [final_message(text, tokenizer) if CHANNEL in text else answer for text, answer in pairs]


def final_message(text: str, tokenizer: Any) -> str:
    """The last final-channel message of ``text`` (decoded with its special tokens), less any special token left in
    it (padding after the end); ``""`` where it has none."""
    found = list(_FINAL.finditer(text))
    if not found:
        return ""
    answer = found[-1].group(1)
    for token in {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}:
        answer = answer.replace(token, "")
    return answer
