"""The RecBench+ prompts exactly as the authors sent them, shared by data_prep, train and evaluate.

The strings below are the authors' published requests, character for character (their OpenAI Batch
files in ``llm_results/``), including the double space of the fixed-K prompt with history
(``Please output  5 recommended``). Movie and book prompts differ only in the item noun. No book
request with history was published: ours says "read books" where the movie prompt says "watched
movies", by analogy. The history is the Python ``repr`` of a list of the user's last 10 items, in
the release's (MovieLens) spelling, as in the authors' files.

Grounded prompts (``--candidates N``, ours, not the authors'): the system prompt says the user's
query comes with candidate items to choose from, and the user message lists them, one per line
(``- Heat (1995)``, with ``: director: michael mann; ...`` under ``--candidate-facts``) before the
query.

The ReRec protocol (``--rerec``, :mod:`rectune.benchmarks.recbench.rerec`) asks for one pick among the
candidates, reasoning allowed, ending in ``\\boxed{title}``.

Answers are titles separated by ``[SEP]``; SFT targets are written the same way (natural spelling,
with the year), so a fine-tuned model answers in the form the paper's scorer reads. With a fixed K the
target names K titles (see :func:`answer_text` for grounded prompts, where it reranks the candidates).
"""

from __future__ import annotations

from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.data.mentions import SEP
from rectune.data.titles import display_title

HISTORY_IN_PROMPT = 10  # the authors' requests list at most 10 history items
_PLURALS = {"movie": "movies", "book": "books"}
_CONSUMED = {"movie": "watched", "book": "read"}


def system_prompt(
    domain: str, with_history: bool = False, k: int | None = None, grounded: bool = False, boxed: bool = False
) -> str:
    item, items = domain, _PLURALS[domain]
    if boxed:
        return (
            f"You are a {item} recommender system. You are given a list of candidate {items} and a query from the "
            f"user. Think about which candidate best satisfies the user's query, then give exactly one {item} from "
            f"the candidates as your final answer, written as \\boxed{{title}}."
        )
    if grounded:
        wanted = f"{k} recommended {items}" if k is not None else f"the recommended {items}"
        given = f"a user's {_CONSUMED[domain]} {items}, " if with_history else ""
        return (
            f"You are a {item} recommender system. You are given {given}a list of candidate {items} and a query "
            f"from the user. You need to recommend {items} from the candidates that satisfy the user's query. "
            f"Please output {wanted} directly, do not output other content."
        )
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


def candidate_lines(row: RecBenchRow) -> str:
    """``Candidate movies:`` and one ``- Title`` (``: facts``) line per candidate."""
    lines = [f"- {c['title']}: {c['facts']}" if c.get("facts") else f"- {c['title']}" for c in row.candidates or []]
    return f"Candidate {_PLURALS[row.domain]}:\n" + "\n".join(lines) + "\n"


def user_message(row: RecBenchRow, with_history: bool = False, grounded: bool = False, boxed: bool = False) -> str:
    items = _PLURALS[row.domain]
    request = f"Query: {row.query}\nRecommended {items} (separated by {SEP}):"
    if boxed:
        request = f"Query: {row.query}\nYour pick (one {row.domain}, as \\boxed{{title}}):"
    if grounded:
        request = candidate_lines(row) + request
    if with_history and row.history:
        history = repr(list(row.history[-HISTORY_IN_PROMPT:]))
        return f"The user has {_CONSUMED[row.domain]} the following {items}:{history}\n{request}"
    return request


def build_messages(
    row: RecBenchRow, with_history: bool = False, k: int | None = None, grounded: bool = False, boxed: bool = False
) -> list[dict]:
    """System + user messages for ``row`` (history, candidates only when asked for and present; ``boxed``: the
    ReRec protocol's one boxed pick among the candidates)."""
    use_history = with_history and bool(row.history) and not boxed
    use_candidates = grounded and bool(row.candidates)
    boxed = boxed and use_candidates
    return [
        {"role": "system", "content": system_prompt(row.domain, use_history, k, use_candidates, boxed)},
        {"role": "user", "content": user_message(row, use_history, use_candidates, boxed)},
    ]


def answer_text(row: RecBenchRow, k: int | None = None, grounded: bool = False, boxed: bool = False) -> str:
    """SFT target: titles in natural spelling, separated by ``[SEP]`` (``boxed``: ``\\boxed{Title}`` of the true item).

    Without K, every ground-truth title; with K (closed book), the first K of them. Grounded with K: exactly
    K candidates (fewer only when fewer are shown), the true ones first, then the retriever's best other
    candidates, each part in the retriever's order, so the target is what a reranker at K should answer."""
    if boxed:
        return f"\\boxed{{{display_title(row.ground_truth[0])}}}"
    if not (grounded and row.candidates and k):
        return f" {SEP} ".join(display_title(title) for title in row.ground_truth[:k])
    truth = set(row.ground_truth_ids)
    by_rank = sorted(row.candidates, key=lambda c: (c.get("rank", 0), c["title"]))
    chosen = [c for c in by_rank if c["id"] in truth] + [c for c in by_rank if c["id"] not in truth]
    return f" {SEP} ".join(c["title"] for c in chosen[:k])
