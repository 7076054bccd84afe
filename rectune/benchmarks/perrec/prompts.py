"""PerRecBench prompts (pointwise, pairwise, listwise) and the parsers of their answers."""

from __future__ import annotations

import re

from rectune.benchmarks.perrec.rows import PerRecRow
from rectune.data.ratings import rating_text, scale_text

SYSTEM_PROMPT = (
    "You are a personalised recommender system. You judge how much users like an item compared with their "
    "usual taste, from their profiles and their ratings of related items."
)
INSTRUCTIONS = {
    "pointwise": "How would the user rate the item, on a scale from {scale}? Answer with the rating only.",
    "pairwise": "Which user liked the item more, relative to their own average rating? Answer with A or B only.",
    "listwise": (
        "Rank the users from the one who liked the item most, relative to their own average rating, to the one "
        'who liked it least. Answer with the letters only, e.g. "B > A > C".'
    ),
}


def _user_block(user: dict) -> str:
    lines = [f"User {user['label']}:"]
    if user.get("profile"):
        lines.append(f"Profile: {user['profile']}")
    lines.append(f"Average rating of other items: {user['mean_rating']:.2f}")
    if user["history"]:
        lines.append("Ratings of related items:")
        lines += [f"- {h['title']}: {rating_text(h['rating'])}" for h in user["history"]]
    return "\n".join(lines)


def build_messages(row: PerRecRow) -> list[dict]:
    item = row.item
    lines = [f"Item: {item['title']}"]
    if item.get("categories"):
        lines.append(f"Categories: {', '.join(item['categories'])}")
    if item.get("description"):
        lines.append(f"Description: {item['description'][:300]}")
    text = "\n".join(lines) + "\n\n" + "\n\n".join(_user_block(u) for u in row.users)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{text}\n\n{INSTRUCTIONS[row.task].format(scale=scale_text(row.scale))}"},
    ]


_CHOICE = re.compile(r"\b(?:[Uu]ser\s+)?([AB])\b")
_STATED = re.compile(r"\b(?i:answer(?:\s+is)?)\W{0,8}(?:[Uu]ser\s+)?([AB])\b")  # "Answer: B", "the answer is B"
_MORE = re.compile(r"\b([AB])\b[^.!?\n]*?\bmore\b")  # "... User B liked the item more"
_LETTER = re.compile(r"\b([A-H])\b")


def parse_choice(text: str) -> str | None:
    """The letter an answer chooses: a stated answer ("Answer: B"), else the letter nearest before "more" in
    its sentence ("Between User A and User B, User B liked it more": B), else the first letter named."""
    stated = _STATED.search(text)
    if stated:
        return stated.group(1)
    more = _MORE.search(text)
    if more:
        letters = _CHOICE.findall(text[more.start() : more.end()])
        return letters[-1]
    match = _CHOICE.search(text)
    return match.group(1) if match else None


_CHAIN = re.compile(r"\b(?:[Uu]ser\s+)?[A-H]\b(?:\s*>\s*(?:[Uu]ser\s+)?[A-H]\b)+")  # "B > A > C"


def parse_ranking(text: str, labels: list[str]) -> list[str] | None:
    """The labels in the order written (a "B > A > C" chain that names them all, else every letter as it
    comes, so the article in "A closer look: B > C > A" does not count); None unless every label appears."""
    for chain in _CHAIN.findall(text):
        order = list(dict.fromkeys(m for m in _LETTER.findall(chain) if m in labels))
        if len(order) == len(labels):
            return order
    order = list(dict.fromkeys(m for m in _LETTER.findall(text) if m in labels))
    return order if len(order) == len(labels) else None
