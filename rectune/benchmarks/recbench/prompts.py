"""The RecBench+ prompts exactly as the authors sent them, shared by data_prep, train and evaluate.

The strings below are the authors' published requests, character for character (their OpenAI Batch
files in ``llm_results/``), including the double space of the fixed-K prompt with history
(``Please output  5 recommended``). Movie and book prompts differ only in the item noun. No book
request with history was published: ours says "read books" where the movie prompt says "watched
movies", by analogy. The history is the Python ``repr`` of a list of the user's last 10 items, in
the release's (MovieLens) spelling, as in the authors' files.

Answers are titles separated by ``[SEP]``; SFT targets are written the same way (natural spelling,
with the year), so a fine-tuned model answers in the form the paper's scorer reads.
"""

from __future__ import annotations

from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.data.mentions import SEP
from rectune.data.titles import display_title

HISTORY_IN_PROMPT = 10  # the authors' requests list at most 10 history items
_PLURALS = {"movie": "movies", "book": "books"}
_CONSUMED = {"movie": "watched", "book": "read"}


def system_prompt(domain: str, with_history: bool = False, k: int | None = None) -> str:
    item, items = domain, _PLURALS[domain]
    if with_history:
        wanted = f" {k} recommended {items}" if k is not None else f"the recommended {items}"
        return (
            f"You are a {item} recommender system. You are given a user's {_CONSUMED[domain]} {items} and a query "
            f"from the user. You need to recommend {items} that satisfy the user's query and user preferences. "
            f"Please output {wanted} directly, do not output other content."
        )
    wanted = f"{k} recommended {items}" if k is not None else f"the recommended {items}"
    return (
        f"You are a {item} recommender system. You are given a query from the user. You need to recommend "
        f"{items} that satisfy the user's query. Please output {wanted} directly, do not output other content."
    )


def user_message(row: RecBenchRow, with_history: bool = False) -> str:
    items = _PLURALS[row.domain]
    request = f"Query: {row.query}\nRecommended {items} (separated by {SEP}):"
    if with_history and row.history:
        history = repr(list(row.history[-HISTORY_IN_PROMPT:]))
        return f"The user has {_CONSUMED[row.domain]} the following {items}:{history}\n{request}"
    return request


def build_messages(row: RecBenchRow, with_history: bool = False, k: int | None = None) -> list[dict]:
    """System + user messages for ``row`` (history only when asked for and present)."""
    use_history = with_history and bool(row.history)
    return [
        {"role": "system", "content": system_prompt(row.domain, use_history, k)},
        {"role": "user", "content": user_message(row, use_history)},
    ]


def answer_text(row: RecBenchRow) -> str:
    """SFT target: the ground-truth titles in natural spelling, separated by ``[SEP]``."""
    return f" {SEP} ".join(display_title(title) for title in row.ground_truth)
