"""LLMRec prompts: LLMRec's three parts, a task description, the behaviour injection (the user's
history, oldest first, with ratings) and a format indicator.

Rows from ratings-only sources (``feedback: ratings``, MovieLens) are phrased for the domain:
the user rated what they watched; nothing was reviewed.
"""

from __future__ import annotations

from rectune.benchmarks.llmrec.rows import LLMRecRow
from rectune.data.ratings import scale_text

SYSTEM_PROMPT = "You are a recommender system for an online shop. Follow the format you are asked for exactly."
DESCRIPTIONS = {
    "rating": "Predict the rating the user will give to the item below, from their earlier reviews.",
    "sequential": "Predict the next item the user will review, from the items they reviewed so far.",
    "direct": "Recommend the item the user is most likely to review next, from the candidates below.",
    "explanation": "Write the review the user would write about the item below: why they would like it or not.",
    "summarization": "Write a short title for the user's review below.",
}
RATINGS_SYSTEM_PROMPT = "You are a recommender system for {domain}. Follow the format you are asked for exactly."
RATINGS_DESCRIPTIONS = {
    "rating": "Predict the rating the user will give to the item below, from their earlier ratings.",
    "sequential": "Predict the next item the user will rate, from the items they rated so far.",
    "direct": "Recommend the item the user is most likely to rate next, from the candidates below.",
}
DIRECT_ANSWER_SIZE = 10  # the format indicator's "up to 10 candidate titles"
FORMATS = {
    "rating": "Answer with a single number from {scale}.",
    "sequential": "Answer with up to 10 item titles, one per line, most likely first.",
    "direct": "Answer with up to 10 candidate titles, one per line, most likely first.",
    "explanation": "Answer with the review text only.",
    "summarization": "Answer with the title only.",
}


def build_messages(row: LLMRecRow) -> list[dict]:
    """Task description, behaviour injection (history), format indicator."""
    ratings_only = row.feedback == "ratings"
    parts = [(RATINGS_DESCRIPTIONS if ratings_only else DESCRIPTIONS)[row.task]]
    if row.history:
        lines = [f"{i}. {h['title']}" + (f" (rated {h['rating']:g})" if "rating" in h else "") for i, h in
                 enumerate(row.history, start=1)]  # fmt: skip
        kind = "ratings" if ratings_only else "reviews"
        parts.append(f"The user's earlier {kind}, oldest first:\n" + "\n".join(lines))
    if row.task in ("rating", "explanation", "summarization"):
        parts.append(f"Item: {row.item['title']}")
    if row.task == "summarization":
        parts.append(f"Review: {row.review}")
    if row.candidates:
        parts.append("Candidates:\n" + "\n".join(c["title"] for c in row.candidates))
    parts.append(FORMATS[row.task].format(scale=scale_text(row.scale)))
    system = RATINGS_SYSTEM_PROMPT.format(domain=row.domain) if ratings_only else SYSTEM_PROMPT
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def direct_answer(row: LLMRecRow) -> str:
    """SFT target of a direct-recommendation row: a ranked list as long as the format asks for, the held-out item
    first, then the other candidates in the order the prompt lists them. A target of the held-out title alone
    teaches one-line answers, whose HR@10 can be no more than their HR@1."""
    others = [c["title"] for c in row.candidates if c["id"] != row.item["id"]]
    return "\n".join([row.item["title"], *others][:DIRECT_ANSWER_SIZE])
