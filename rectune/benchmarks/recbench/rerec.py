"""The ReRec protocol (Huang et al., ACL 2026, by the RecBench+ authors): one pick among 20 candidates.

``data_prep/recbench.py --rerec`` shows each query with 20 candidates: one of its true items (the
positive, drawn with the seed) and 19 catalog items drawn with the seed from those that are not true
items of the query (the negatives), in a seeded random order. The row's ground truth becomes the positive
alone, so an answer scores only by picking it. Each candidate keeps its ``rank`` by BM25 over the
query text among the 20 (``baseline:bm25`` reads it). Queries none of whose true items resolve to
the catalog are left out (data prep says how many).

The model reasons as it likes and ends with one ``\\boxed{Title}``; scoring reads the last boxed title
only, so P@1 (= R@1 = NDCG@1, K = 1) is ReRec's hit@1, and an answer with no box recommends nothing.

ReRec's reward terms beside NDCG@K: a format term (:func:`rectune.benchmarks.recbench.rewards.boxed_format`),
QAS, the share of the attributes all true items share that the pick has, which is ``conditions_met``
on a one-title answer (a condition query's conditions are those shared attributes), and item alignment
(:func:`rectune.benchmarks.recbench.rewards.item_alignment`) from ALS item factors fitted on the training
users' histories. Its reasoning-aware advantage reads :func:`wrong_pick_lines`.
"""

from __future__ import annotations

import random
import re

import numpy as np

from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.core.io import RecTuneError
from rectune.data.catalog import KnowledgeGraph
from rectune.data.collaborative import Interactions, fit_als
from rectune.data.retrieval import CandidateRetriever
from rectune.data.titles import CatalogItem, display_title

PROTOCOL = "rerec"
NEGATIVES = 19
_OPEN = "\\boxed{"
_YEAR = re.compile(r"\s*\(\d{4}\)\s*$")


def boxed_contents(text: str) -> list[str]:
    """The contents of every ``\\boxed{...}`` in ``text`` (braces inside are matched); an unclosed box is not one.
    ``"I pick \\boxed{Heat (1995)}"`` -> ``["Heat (1995)"]``."""
    found, start = [], text.find(_OPEN)
    while start != -1:
        depth, end = 1, start + len(_OPEN)
        while end < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        if depth:
            break
        found.append(text[start + len(_OPEN) : end - 1].strip())
        start = text.find(_OPEN, end)
    return found


def boxed_answer(text: str) -> str:
    """The answer a ReRec completion gives: its last boxed content as text (:func:`latex_text`), or ``""`` (no
    recommendation)."""
    contents = boxed_contents(text)
    return latex_text(contents[-1]) if contents else ""


# A box is LaTeX, and reasoning models write a title in it as math-formatted text: \boxed{\text{Heat (1995)}}
_TEXT_COMMAND = re.compile(r"\\(?:text(?:bf|it|tt|sf|rm|normal|up)?|emph|math(?:rm|bf|it|sf|tt)|mbox|operatorname)"
                           r"\s*\{([^{}]*)\}")  # fmt: skip
_ACCENT = re.compile(r"\\['`^\"~=.]\s*\{?([A-Za-z])\}?")  # Am\'elie: the matcher folds accents anyway
_SPACE = re.compile(r"\\[ ,;:!]|~")
_ESCAPED = re.compile(r"\\([&%$#_{}])")


def latex_text(content: str) -> str:
    r"""A box's content as the text it typesets: ``\text{Ocean's\ Eleven}`` -> ``Ocean's Eleven``, ``\textbf{Heat}``
    -> ``Heat``, ``Fast \& Furious`` -> ``Fast & Furious``, ``Am\'elie`` -> ``Amelie``."""
    content = _ACCENT.sub(r"\1", content)  # first: an accent's braces (\'{e}) would stop a command's match
    for _ in range(8):  # nested commands, the innermost first
        unwrapped = _TEXT_COMMAND.sub(r"\1", content)
        if unwrapped == content:
            break
        content = unwrapped
    content = _SPACE.sub(" ", content)
    return " ".join(_ESCAPED.sub(r"\1", content).split())


def attach_rerec_candidates(
    rows: list[RecBenchRow], catalog: list[CatalogItem], kg: KnowledgeGraph, seed: int, negatives: int = NEGATIVES
) -> list[RecBenchRow]:
    """The rows with a resolved true item, each given its positive and ``negatives`` sampled others as
    ``candidates`` (``{"id", "title", "rank"}``, shuffled) and the positive as its only ground truth."""
    if len(catalog) <= negatives:
        raise RecTuneError(f"--rerec draws {negatives} negatives per query: the catalog has {len(catalog)} items")
    retriever = CandidateRetriever(catalog, kg)
    position = {item.id: i for i, item in enumerate(catalog)}
    kept = []
    for row in rows:
        truth = sorted(set(row.ground_truth_ids))
        if not truth:
            continue
        draw = random.Random(f"{seed}/{row.id}")  # a query's draw does not depend on which others are kept
        positive = draw.choice(truth)
        if len(catalog) - len(truth) < negatives:
            raise RecTuneError(f"query {row.id}: fewer than {negatives} catalog items are not its true items")
        chosen: list[str] = []
        while len(chosen) < negatives:
            item_id = catalog[draw.randrange(len(catalog))].id
            if item_id not in truth and item_id not in chosen:
                chosen.append(item_id)
        shown = [positive, *chosen]
        draw.shuffle(shown)
        scores = retriever.scores(row.query)
        by_score = sorted(shown, key=lambda i: (-scores[position[i]], position[i]))
        rank = {item_id: r for r, item_id in enumerate(by_score, start=1)}
        titles = {item_id: display_title(catalog[position[item_id]].title) for item_id in shown}
        row.candidates = [{"id": i, "title": titles[i], "rank": rank[i]} for i in shown]
        row.ground_truth, row.ground_truth_ids = [catalog[position[positive]].title], [positive]
        kept.append(row)
    return kept


def wrong_pick_lines(text: str, truth_ids: set[str], candidates: dict[str, str]) -> list[bool]:
    """Per line of ``text``: whether it names a candidate (``{id: title}``) that is not a true item, by its title
    without the year, whole words, any case (ReRec's reasoning-aware advantage lowers those lines' reward).
    Candidates Heat (1995) (true) and Jaws (1975): ``"Jaws is a thriller.\nHeat it is.\n\boxed{Heat (1995)}"``
    -> ``[True, False, False]``."""
    names = [
        _YEAR.sub("", display_title(title)).strip() for item_id, title in candidates.items() if item_id not in truth_ids
    ]
    patterns = [re.compile(rf"(?<!\w){re.escape(name)}(?!\w)", re.IGNORECASE) for name in names if name]
    return [any(pattern.search(line) for pattern in patterns) for line in text.split("\n")]


def item_factors(rows: list[RecBenchRow], matcher, seed: int = 0) -> dict[str, np.ndarray]:
    """Unit-length ALS item factors (implicit, 32 factors) fitted on the rows' users: each query's source user
    (else the query) with its history and true items, the user-item graph ReRec's item alignment reads."""
    interactions = Interactions()
    for row in rows:
        user = row.source_user or f"query:{row.id}"
        for item_id in [*matcher.resolve_many(row.history), *row.ground_truth_ids]:
            if item_id is not None:
                interactions.add(user, item_id)
    if len(interactions.ratings) < 2 or len(interactions.items()) < 2:
        return {}
    model = fit_als(interactions, factors=32, regularization=0.05, seed=seed)
    factors = np.asarray(model.model.item_factors, dtype=np.float64)
    norms = np.linalg.norm(factors, axis=1, keepdims=True)
    unit = np.divide(factors, norms, out=np.zeros_like(factors), where=norms > 0)
    return dict(zip(model.item_ids, unit, strict=True))
