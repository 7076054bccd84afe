"""Per-rank gains of a RecBench+ answer, for a rank-level advantage (Rank-GRPO, Zhu et al., ICLR 2026).

An answer's items are its ``[SEP]`` pieces that name a title (without ``[SEP]``, the lines its extraction reads
that name one: a list's titles, not the details nested under them nor an intro). Item k of the first
K earns the NDCG@K term ``1 / log2(k + 1) / IDCG`` when it resolves to a true item named for the first
time and (grounded prompts) among the candidates shown, else 0: the same slots as the ``ndcg_at_k``
reward, so the gains of an answer add up to its ``ndcg_at_k``. Each item is returned with the character
offset where it ends, so a trainer can tell which tokens wrote it.
"""

from __future__ import annotations

import math

from rectune.data.completions import reasoning_blanked
from rectune.data.mentions import SEPARATOR, line_mentions, parse_mentions


def item_gains(text: str, truth: set[str], shown: set[str], k: int, matcher) -> list[tuple[int, float]]:
    """``(end offset, gain)`` per item of ``text``, in order (every item, gains 0 past the first ``k``); a piece
    or line that names no title (an intro, a detail under a title) is no item, as in the answer's extraction.
    Truth Heat and Ronin, K 2: ``"Heat [SEP] Casino [SEP] Ronin"`` -> ``[(4, 1 / (1 + 1/log2 3)), (17, 0.0),
    (29, 0.0)]`` (Ronin is third); ``"My picks:\\nRonin"`` -> ``[(15, 1 / (1 + 1/log2 3))]``."""
    text = reasoning_blanked(text)  # the titles a <think> block names are not the answer's, as in its extraction
    if SEPARATOR.search(text):
        ends, start = [], 0
        for match in SEPARATOR.finditer(text):
            ends.append((start, match.start()))
            start = match.end()
        ends.append((start, len(text)))
        pieces = [(b, parse_mentions(text[a:b], matcher)) for a, b in ends if text[a:b].strip()]
    else:
        pieces = [(b, mentions) for _, b, mentions in line_mentions(text, matcher)]
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(k, len(truth))))
    gains, seen = [], set()
    for end, mentions in pieces:
        if not mentions:
            continue
        rank = len(gains)
        item = matcher.resolve(mentions[0])
        earned = rank < k and item in truth and item not in seen and (not shown or item in shown)
        if item is not None:
            seen.add(item)
        gains.append((end, 1 / math.log2(rank + 2) / ideal if earned and ideal else 0.0))
    return gains
