"""Prompts of the RecBench+ paper (Appendix G), shared by data_prep, train and evaluate.

Training and evaluation build their chat messages from the same canonical row
(:func:`messages_for` picks the benchmark's builder), so a checkpoint is always scored on
exactly the prompts it learnt.
"""

from __future__ import annotations

from rectune import llmrec, perrec
from rectune.schema import BenchmarkRow, Row
from rectune.titles import display_title

_NOUNS = {"movie": "movies", "book": "books"}
_HISTORY_NAMES = {"movie": "watched movies", "book": "reading history"}


def system_prompt(domain: str, with_history: bool = False, k: int | None = None) -> str:
    items = _NOUNS[domain]
    if with_history:
        text = (
            f"You are a {domain} recommender system. You are given a user's {_HISTORY_NAMES[domain]} and a query "
            f"from the user. You need to recommend {items} that satisfy the user's query and user preferences. "
            f"Please output the recommended {items} directly; do not output other content."
        )
    else:
        text = (
            f"You are a {domain} recommender system. You are given a query from the user. You need to recommend "
            f"{items} that satisfy the user's query. Please output the recommended {items} directly; do not output "
            "other content."
        )
    if k is not None:
        # Appendix F's fixed-K variant.
        text = text.replace(f"Please output the recommended {items}", f"Please output {k} recommended {items}")
    return text


def user_message(row: BenchmarkRow, with_history: bool = False) -> str:
    if with_history and row.history:
        history = "; ".join(display_title(t) for t in row.history)
        return f"{_HISTORY_NAMES[row.domain].capitalize()}: {history}\nQuery: {row.query}"
    return row.query


def build_messages(row: BenchmarkRow, with_history: bool = False, k: int | None = None) -> list[dict]:
    """System + user messages for ``row`` (history only when asked for and present)."""
    use_history = with_history and bool(row.history)
    return [
        {"role": "system", "content": system_prompt(row.domain, use_history, k)},
        {"role": "user", "content": user_message(row, use_history)},
    ]


def answer_text(row: BenchmarkRow) -> str:
    """SFT target: the ground-truth titles, one per line, in their natural spelling."""
    return "\n".join(display_title(title) for title in row.ground_truth)


def messages_for(row: Row, variant: dict) -> list[dict]:
    """Chat messages of any benchmark's row; ``variant`` (history, K) applies to RecBench+ only."""
    if row.benchmark == "perrecbench":
        return perrec.build_messages(row)
    if row.benchmark == "llmrec":
        return llmrec.build_messages(row)
    return build_messages(row, variant["with_history"], variant["k"])
