"""GRPO rewards for RecBench+, built on the same scorer as evaluation.

Each reward is a plain function in TRL's signature: the completions, then the
``train_rft.jsonl`` label columns GRPOTrainer forwards (``ground_truth``, ``ground_truth_ids``,
``task``, ``conditions``), then ``resources`` (catalog and KG, bound by RecTune) and TRL's other
keyword arguments. It returns one value per completion and never raises, whatever the text.
Rewards that do not apply to a row return ``None`` (TRL then leaves them out of that row's
weighted sum).

The examples below use a catalog holding "Heat (1995)", "Alien (1979)" and "Jaws (1975)", a
KG saying Heat is directed by Michael Mann, and a row with ground truth Heat and Alien.

The misinformed rule rewards both answers the paper counts as good (a refusal raises FTR,
which is better on misinformed queries; a corrected premise raises recall) and punishes
only recommendations built on the wrong fact.
"""

from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass
from pathlib import Path

from rectune.benchmarks import Resources, load_rows
from rectune.benchmarks.recbench import rerec
from rectune.benchmarks.recbench.metrics import DEFAULT_K, QueryScore, ground_truth_set, score_query
from rectune.benchmarks.recbench.rows import NAME, RecBenchRow
from rectune.data.completions import completion_text
from rectune.data.mentions import SEP, parse_mentions
from rectune.data.titles import Extraction


@dataclass
class Judged:
    """One completion scored against its labels: what every reward reads."""

    score: QueryScore
    row: RecBenchRow
    extraction: Extraction
    text: str


def judge(completions, ground_truth, ground_truth_ids, task, conditions, resources: Resources) -> list[Judged]:
    """Score each completion against its row's labels with the evaluation's scorer."""
    matcher, kg = resources.matcher(), resources.kg()
    texts = [completion_text(c) for c in completions]
    if resources.variant.get("protocol") == rerec.PROTOCOL:  # one pick: the last boxed title, nothing else
        texts = [rerec.boxed_answer(text) for text in texts]
    judged = []
    for i, (text, extraction) in enumerate(zip(texts, matcher.extract_many(texts), strict=True)):
        row = RecBenchRow(
            id="reward",
            benchmark=NAME,
            domain="movie",
            task=task[i],
            query="-",
            ground_truth=list(ground_truth[i]) or ["-"],
            ground_truth_ids=list(ground_truth_ids[i] or []),
            conditions=[list(c) for c in conditions[i] or []],
            condition_num=len(conditions[i] or []),
        )
        judged.append(Judged(score_query(row, extraction, matcher, kg), row, extraction, text))
    return judged


def recall(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """Hits / ground-truth items. ``"Heat [SEP] Jaws"`` hits Heat of {Heat, Alien}: 1/2 = 0.5."""
    return [j.score.recall for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)]


def precision(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """Hits / recommended items. ``"1. Heat\\n2. Jaws"``: 1 hit of 2 recommended = 0.5."""
    judged = judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)
    return [j.score.precision for j in judged]


def f1(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """Harmonic mean of precision and recall. ``"1. Heat\\n2. Jaws"``: P 0.5, R 0.5, F1 0.5."""
    values = []
    for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources):
        total = j.score.precision + j.score.recall
        values.append(2 * j.score.precision * j.score.recall / total if total else 0.0)
    return values


def cmr(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float | None]:
    """Share of recommended items meeting every condition in the KG (condition tasks only, else None).

    Conditions ``[["Director", "Michael Mann"]]``: ``"Heat\\nJaws"`` = 1/2 = 0.5.
    """
    return [j.score.cmr for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)]


def conditions_met(
    completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs
) -> list[float | None]:
    """Partial credit from the KG (condition tasks only, else None): the mean, over recommended items,
    of the share of the query's conditions each item meets; unresolved titles count 0.

    Unlike recall it rewards a step towards a hit (the right director, the wrong genre), so a model
    that rarely names a ground-truth item still gets groups whose rewards differ. Conditions
    ``[["Director", "Michael Mann"], ["Genre", "Crime"]]`` with Heat a crime film: ``"Heat\nJaws"`` =
    (2/2 + 0/2) / 2 = 0.5.
    """
    kg = resources.kg()
    values: list[float | None] = []
    for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources):
        asked = j.row.conditions
        if not j.row.is_condition_based or not asked:
            values.append(None)
            continue
        met = sum(kg.satisfies(item, [condition]) for item in j.extraction.item_ids for condition in asked)
        count = j.extraction.count
        values.append(met / (len(asked) * count) if count else 0.0)
    return values


def format(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """1.0 for the paper's answer form, titles separated by ``[SEP]`` with nothing else; 0.5 for titles
    in another form or with prose mixed in; 0.0 when nothing parses.

    ``"Heat [SEP] Jaws"`` = 1.0; ``"1. Heat\\n2. Jaws"`` = 0.5; ``"Here are two films:\\nHeat"`` = 0.5;
    ``"Sorry."`` = 0.0. The authors' scorer counts an answer without ``[SEP]`` as a failure to recommend.
    """
    matcher = resources.matcher()
    values = []
    for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources):
        if j.extraction.count == 0:
            values.append(0.0)
            continue
        pieces = [piece for piece in j.text.split(SEP) if piece.strip()]
        clean = SEP in j.text and all(
            "\n" not in piece.strip() and len(parse_mentions(piece, matcher)) == 1 for piece in pieces
        )
        values.append(1.0 if clean else 0.5)
    return values


def hallucination(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """Minus the share of mentions that resolve to no catalog item. ``"Heat\\nMy Invented Film"`` = -0.5."""
    judged = judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)
    return [-len(j.extraction.unresolved) / j.extraction.count if j.extraction.count else 0.0 for j in judged]


def repetition(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """Minus the share of named titles that repeat an earlier one: a degenerate answer is charged, so
    GRPO can move away from it (scoring counts each title once, which hides repeats).
    ``"Heat [SEP] Heat [SEP] Heat [SEP] Jaws"``: 4 named, 2 distinct = -2/4 = -0.5."""
    judged = judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)
    return [
        -(j.extraction.named - j.extraction.count) / j.extraction.named if j.extraction.named else 0.0 for j in judged
    ]


def from_candidates(
    completions, ground_truth, ground_truth_ids, task, conditions, *, resources, candidate_ids=None, **kwargs
) -> list[float | None]:
    """Grounded prompts only (else None): the share of recommended items that are among the row's
    candidates; partial credit for choosing from the list before hits are common.
    Candidates Heat and Alien: ``"Heat [SEP] Jaws"`` = 1/2 = 0.5; ``""`` = 0.0."""
    values: list[float | None] = []
    judged = judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)
    for i, j in enumerate(judged):
        shown = set(candidate_ids[i] or []) if candidate_ids is not None else set()
        if not shown:
            values.append(None)
        else:
            chosen = sum(item in shown for item in j.extraction.item_ids)
            values.append(chosen / j.extraction.count if j.extraction.count else 0.0)
    return values


def _slots(j: Judged, k: int, shown: set[str], truth: set[str]) -> list[bool]:
    """Whether each of the first ``k`` titles named earns its place: a true item, named for the first time,
    and (grounded prompts) among the candidates shown. A repeat or an item from outside the list takes
    its slot and earns nothing, so naming more titles cannot raise a score at K."""
    seen: set[str] = set()
    earned = []
    for item in j.extraction.sequence[:k]:
        earned.append(item in truth and item not in seen and (not shown or item in shown))
        seen.add(item)
    return earned


def _shown(candidate_ids, i: int) -> set[str]:
    return set(candidate_ids[i] or []) if candidate_ids is not None else set()


def ndcg_at_k(
    completions, ground_truth, ground_truth_ids, task, conditions, *, resources, candidate_ids=None, **kwargs
) -> list[float]:
    """NDCG over the first K titles named (K: the prompt's, else 5), repeats and items outside the candidate
    list earning nothing in their slot. Truth Heat and Ronin, K 2: ``"Heat [SEP] Casino"`` = 1 / (1 + 1/log2 3)
    = 0.613; ``"Casino [SEP] Heat"`` = 0.387; ``"Heat [SEP] Heat [SEP] Ronin"`` = 0.613 (Ronin is third)."""
    k = resources.top_k or DEFAULT_K
    values = []
    for i, j in enumerate(judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)):
        truth = ground_truth_set(j.row, resources.matcher())
        ideal = sum(1 / math.log2(rank + 2) for rank in range(min(k, len(truth))))
        slots = _slots(j, k, _shown(candidate_ids, i), truth)
        gain = sum(1 / math.log2(rank + 2) for rank, hit in enumerate(slots) if hit)
        values.append(gain / ideal if ideal else 0.0)
    return values


def precision_at_k(
    completions, ground_truth, ground_truth_ids, task, conditions, *, resources, candidate_ids=None, **kwargs
) -> list[float]:
    """Hits among the first K titles named, over K (slots as :func:`ndcg_at_k` counts them). K 2:
    ``"Heat [SEP] Ronin [SEP] Casino"`` = 2/2 = 1.0; ``"Casino [SEP] Jaws [SEP] Heat [SEP] Ronin"`` = 0.0."""
    k = resources.top_k or DEFAULT_K
    judged = judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)
    matcher = resources.matcher()
    return [
        sum(_slots(j, k, _shown(candidate_ids, i), ground_truth_set(j.row, matcher))) / k for i, j in enumerate(judged)
    ]


def beyond_head(
    completions,
    ground_truth,
    ground_truth_ids,
    task,
    conditions,
    *,
    resources,
    candidate_ids=None,
    candidate_ranks=None,
    **kwargs,
) -> list[float | None]:
    """Grounded prompts whose candidates keep the retriever's ranks only (else None): the true items among the
    first K titles named (slots as :func:`ndcg_at_k` counts them) that the retriever's own top K lacks, over K.
    Copying the list's head never earns it; departing from the head where the head is wrong does. K 2,
    candidates Casino (rank 1), Heat (2), Ronin (3), truth Heat and Ronin: ``"Ronin [SEP] Heat"`` = 1/2 = 0.5;
    ``"Heat [SEP] Casino"`` = 0.0 (Heat is in the head)."""
    k = resources.top_k or DEFAULT_K
    matcher = resources.matcher()
    values: list[float | None] = []
    for i, j in enumerate(judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)):
        ranks = candidate_ranks[i] if candidate_ranks is not None else None
        if not ranks:
            values.append(None)
            continue
        head = {item for item, rank in zip(candidate_ids[i], ranks, strict=True) if rank <= k}
        slots = _slots(j, k, _shown(candidate_ids, i), ground_truth_set(j.row, matcher))
        values.append(
            sum(hit and item not in head for hit, item in zip(slots, j.extraction.sequence[:k], strict=True)) / k
        )
    return values


def length_at_k(completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs) -> list[float]:
    """0 for an answer naming exactly K titles (repeats counted), down by 1/K for each title more or fewer,
    to at most -1. K 2: ``"Heat [SEP] Ronin"`` = 0.0; ``"Heat [SEP] Ronin [SEP] Casino"`` = -0.5; ``""`` = -1.0."""
    k = resources.top_k or DEFAULT_K
    judged = judge(completions, ground_truth, ground_truth_ids, task, conditions, resources)
    return [-min(1.0, abs(j.extraction.named - k) / k) for j in judged]


_CLOSING = re.compile(r"(?:\$\$?|\\[\])])?\s*\.?\s*$")  # what may follow the box: math mode's end, a full stop


def boxed_format(completions, **kwargs) -> list[float]:
    """ReRec's format term: +0.5 for an answer ending in exactly one ``\\boxed{...}`` holding a title (in math mode
    or not), else -0.5. ``"Heat fits. \\boxed{Heat (1995)}"`` = 0.5, as ``"$\\boxed{\\text{Heat}}$"``;
    ``"\\boxed{Heat} or \\boxed{Jaws}"`` = -0.5; ``"\\boxed{\\text{}}"`` = -0.5; ``"Heat"`` = -0.5."""
    values = []
    for completion in completions:
        text = completion_text(completion)
        boxes = rerec.boxed_contents(text)
        ends_boxed = len(boxes) == 1 and bool(rerec.latex_text(boxes[0])) and text[: _CLOSING.search(text).start()]\
            .endswith("}")  # fmt: skip
        values.append(0.5 if ends_boxed else -0.5)
    return values


_FACTORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Resources -> its rows' ALS item factors


def item_alignment(
    completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs
) -> list[float]:
    """ReRec's item alignment: the cosine similarity, in ALS item factors fitted on the training rows' users
    (:func:`~rectune.benchmarks.recbench.rerec.item_factors`), between the item picked and the nearest true
    item; 0 for no pick or an item the factors do not know. A true pick scores 1.0."""
    if resources not in _FACTORS:  # fitted once per run, on the rows the rewards were built for (none in memory)
        rows = load_rows(resources.data) if Path(resources.data).is_file() else []
        _FACTORS[resources] = rerec.item_factors(rows, resources.matcher())
    factors = _FACTORS[resources]
    values = []
    for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources):
        picked = [factors[i] for i in j.extraction.sequence[:1] if i in factors]
        truth = [factors[i] for i in j.row.ground_truth_ids if i in factors]
        values.append(max(float(picked[0] @ t) for t in truth) if picked and truth else 0.0)
    return values


def misinformed(
    completions, ground_truth, ground_truth_ids, task, conditions, *, resources, **kwargs
) -> list[float | None]:
    """Misinformed queries only (else None): 1.0 when the answer refuses (recommends nothing) or
    recommends at least one true item, i.e. it did not follow the false premise; 0.0 when every
    recommended item is outside the ground truth. ``""`` = 1.0, ``"Heat"`` = 1.0, ``"Jaws"`` = 0.0.
    """
    values: list[float | None] = []
    for j in judge(completions, ground_truth, ground_truth_ids, task, conditions, resources):
        if j.row.task != "misinformed":
            values.append(None)
        else:
            values.append(1.0 if j.extraction.count == 0 or j.score.n_hits > 0 else 0.0)
    return values


REWARDS = {
    f.__name__: f
    for f in (
        recall,
        precision,
        f1,
        cmr,
        conditions_met,
        format,
        hallucination,
        repetition,
        from_candidates,
        ndcg_at_k,
        precision_at_k,
        beyond_head,
        length_at_k,
        boxed_format,
        item_alignment,
        misinformed,
    )
}
DEFAULT_REWARDS = ("recall", "format", "hallucination", "misinformed")
