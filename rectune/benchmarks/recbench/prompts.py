"""Prompts of the RecBench+ paper (Appendix G), shared by data_prep, train and evaluate.

Training and evaluation build their chat messages from the same canonical row, so a
checkpoint is always scored on exactly the prompts it learnt. The prompt variant (history in
the prompt, the fixed-K wording of Appendix F) is recorded by data_prep in ``stats.json``.
"""

from __future__ import annotations

from rectune.benchmarks.recbench.rows import RecBenchRow
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


def user_message(row: RecBenchRow, with_history: bool = False) -> str:
    if with_history and row.history:
        history = "; ".join(display_title(t) for t in row.history)
        return f"{_HISTORY_NAMES[row.domain].capitalize()}: {history}\nQuery: {row.query}"
    return row.query


def build_messages(row: RecBenchRow, with_history: bool = False, k: int | None = None) -> list[dict]:
    """System + user messages for ``row`` (history only when asked for and present)."""
    use_history = with_history and bool(row.history)
    return [
        {"role": "system", "content": system_prompt(row.domain, use_history, k)},
        {"role": "user", "content": user_message(row, use_history)},
    ]


def answer_text(row: RecBenchRow) -> str:
    """SFT target: the ground-truth titles, one per line, in their natural spelling."""
    return "\n".join(display_title(title) for title in row.ground_truth)
