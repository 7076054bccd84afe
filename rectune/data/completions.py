"""What scoring and rewards read of a model's completion: clean text, reasoning removed, length capped.

Every completion goes through :func:`answer_text` before any benchmark parses it, so parsers see
valid text (no NUL or other control characters, no lone surrogates) and score what the model
recommended rather than its reasoning:

* ``<think>…</think>`` blocks are removed; an unclosed ``<think>`` hides the rest of the text
  (the model never reached an answer), and a ``</think>`` without its opening tag (chat templates
  that open the block in the prompt) hides everything before it.
* The answer is then cut to :attr:`CompletionLimits.max_chars` characters, and a parsed answer
  to :attr:`CompletionLimits.max_mentions` titles. Reports count how often either cap applied.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from rectune.core.cli import positive_int


@dataclass(frozen=True)
class CompletionLimits:
    """Caps on what is parsed of one completion (protecting scoring and GRPO from runaway output)."""

    max_chars: int = 20_000  # of the answer, after reasoning blocks are removed
    max_mentions: int = 100  # titles parsed from one answer (RecBench+, LLMRec ranking tasks)


DEFAULT_LIMITS = CompletionLimits()
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_THINK_END = re.compile(r"</think>", re.IGNORECASE)


@dataclass(frozen=True)
class Answer:
    text: str
    reasoning_removed: bool = False
    truncated: bool = False


def clean_text(text: str) -> str:
    """``text`` without control characters (tabs and newlines stay) and with lone surrogates as U+FFFD."""
    if text.isascii():
        return _CONTROL.sub("", text) if not text.isprintable() else text
    return _CONTROL.sub("", _SURROGATE.sub("\ufffd", text))


def answer_text(completion: object, limits: CompletionLimits = DEFAULT_LIMITS) -> Answer:
    """The answer part of ``completion`` (any object; non-strings are empty answers)."""
    text = clean_text(completion) if isinstance(completion, str) else ""
    removed = False
    if "hink>" in text or "HINK>" in text:
        text = _THINK_BLOCK.sub("\n", text[_answer_start(text) :])
        removed = True
    truncated = len(text) > limits.max_chars
    return Answer(text[: limits.max_chars] if truncated else text, removed, truncated)


def reasoning_blanked(text: str) -> str:
    """``text`` with the reasoning :func:`answer_text` removes replaced by line breaks, one for each character, so
    that an offset into it is an offset into ``text`` (where a trainer credits the tokens that wrote a title)."""
    if "hink>" not in text and "HINK>" not in text:
        return text
    answer = _answer_start(text)
    for first, end in [(0, answer)] + [match.span() for match in _THINK_BLOCK.finditer(text, answer)]:
        text = text[:first] + "\n" * (end - first) + text[end:]
    return text


def _answer_start(text: str) -> int:
    """Where the text after a reasoning block opened in the prompt begins (its ``</think>`` before any
    ``<think>``), else 0."""
    ends = _THINK_END.search(text)
    opened = text.lower().find("<think>")
    return ends.end() if ends and (opened < 0 or ends.start() < opened) else 0


def completion_text(completion: object) -> str:
    """The answer of a completion in TRL's standard (str) or conversational (list of messages) form:
    clean text, reasoning blocks removed, capped (:func:`~rectune.data.completions.answer_text`)."""
    if isinstance(completion, list):
        completion = "".join(
            m.get("content", "") for m in completion if isinstance(m, dict) and isinstance(m.get("content"), str)
        )
    elif isinstance(completion, dict):
        completion = completion.get("content")
    return answer_text(completion).text


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """``--max-chars``/``--max-mentions``: the caps on what is scored of one completion."""
    parser.add_argument(
        "--max-chars",
        type=positive_int,
        default=DEFAULT_LIMITS.max_chars,
        help="characters of each answer scored, after <think> blocks are removed (default: %(default)s)",
    )
    parser.add_argument(
        "--max-mentions",
        type=positive_int,
        default=DEFAULT_LIMITS.max_mentions,
        help="titles parsed from each answer (default: %(default)s)",
    )


def limits(args: argparse.Namespace) -> CompletionLimits:
    return CompletionLimits(args.max_chars, args.max_mentions)
