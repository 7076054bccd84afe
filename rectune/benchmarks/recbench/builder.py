"""Build RecBench+-style queries from an item knowledge graph and an interaction log (seed 001, §2.2-2.3).

Input: items with relations (``{"id", "title", "relations": {relation: [values]}}`` per line), each
user's items in time order, and users' demographics. Output: records in the RecBench+ release
formats, so ``data_prep/recbench.py`` reads the result unchanged.

* **Shared relations**: for each user, sets of 1-4 (relation, value) conditions that at least two
  items of the user's history share and that hold at least one *anchor* relation
  (``anchor_relations``: Director, Starring, Composer by default; a MovieLens build anchors on
  Year and Tag). The search grows sets one condition at a time from the anchors and drops a set
  as soon as fewer than two history items share it (adding a condition can only shrink that),
  keeping at most ``max_search`` candidate sets per size, so a heavy user costs a bounded time.
* **Ground truth**: every catalog item meeting all the conditions (``movieSubset``); the history
  used for prompts is then the user's items minus that ground truth.
* **Explicit** queries state the conditions. **Implicit** queries replace one person by a
  reference through another item ("the director of X"); X is left out of the ground truth.
  **Misinformed** queries attach a false claim ("Y, which W directed") to an item Y that really
  has the hidden value; Y is left out of the ground truth.
* **Interest-based** queries come from item pairs that many users consumed one right after the
  other; the ground truth is what those users consumed next.
* **Demographics-based** queries come from each demographic group's distinctive popular items
  (tf-idf of the group's item counts against the other groups of the same kind).

Query text comes from fixed templates chosen by a seeded generator, so a build is deterministic;
``rewrite`` may rephrase condition queries (e.g. with a local chat model), and a rewrite that drops
a condition's value or a referenced title is discarded in favour of the template text.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from tqdm import tqdm

from rectune.benchmarks.recbench.query_text import (
    DEMOGRAPHIC_TEMPLATES,
    INTEREST_TEMPLATES,
    ROLE_NOUNS,
    SITUATIONS,
    describe,
    group_label,
    group_of,
)
from rectune.catalog import read_item_file
from rectune.io import RecTuneError
from rectune.titles import CatalogItem

PERSON_RELATIONS = ("Director", "Starring", "Composer")
# relations an implicit or misinformed query can hide or falsify ("the director of X", "X, from 1990")
HIDDEN_RELATIONS = (*PERSON_RELATIONS, "Year")


def load_items(path) -> list[CatalogItem]:
    """Items from a KG file, their relations as attributes; a bad row fails with file, line and field."""
    return read_item_file(path, "relations", _is_relations, "must map relation names to lists of strings")


def _is_relations(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) and x for x in v)
        for k, v in value.items()
    )


@dataclass
class BuildSettings:
    seed: int = 0
    queries_per_user: int = 2
    max_ground_truth: int = 12
    max_conditions: int = 4
    min_consecutive_users: int = 3
    min_group_users: int = 5
    top_items: int = 10
    anchor_relations: tuple[str, ...] = PERSON_RELATIONS
    max_search: int = 400  # candidate condition sets kept per size and user
    allow_tied_pairs: bool = False  # interest pairs from events that share a timestamp


class BenchmarkBuilder:
    def __init__(self, items: list[CatalogItem], settings: BuildSettings, rewrite: Callable[[str], str] | None = None):
        self.items = {item.id: item for item in items}
        self.settings = settings
        self.rewrite = rewrite
        self.rng = random.Random(settings.seed)
        self.holders: dict[tuple[str, str], set[str]] = defaultdict(set)
        for item in items:
            for relation, values in item.attributes.items():
                for value in values:
                    self.holders[(relation, value)].add(item.id)

    # -- condition-based queries ---------------------------------------------------------------

    def ground_truth(self, conditions: list[tuple[str, str]]) -> set[str]:
        return set.intersection(*(self.holders[c] for c in conditions))

    def check_anchors(self) -> None:
        """Stop before searching when no item holds an anchor relation: no condition query could be built."""
        present = sorted({relation for relation, _ in self.holders})
        if not any(relation in self.settings.anchor_relations for relation in present):
            raise RecTuneError(
                f"no item has an anchor relation ({', '.join(self.settings.anchor_relations)}), so no condition "
                f"query can be built; the KG's relations are: {', '.join(present) or 'none'} "
                "(choose anchors among them with --anchor-relations)"
            )

    def shared_conditions(self, history: list[str]) -> list[tuple[tuple[str, str], ...]]:
        """Condition sets (1-4 pairs, one an anchor) that two history items share, with a small ground truth."""
        items = list(dict.fromkeys(history))
        history_set = set(items)
        anchors = sorted(
            pair for pair, n in self._pair_counts(items).items() if n >= 2 and pair[0] in self.settings.anchor_relations
        )
        # each candidate: (conditions sorted, ground truth, the history items sharing them)
        level = [((pair,), self.holders[pair], self.holders[pair] & history_set) for pair in anchors]
        found, seen = [], set()
        for size in range(1, self.settings.max_conditions + 1):
            if len(level) > self.settings.max_search:
                level = self.rng.sample(level, self.settings.max_search)
            following = []
            for combo, truth, sharing in level:
                natural = size == 1 or len({r for r, _ in combo}) >= 2 or combo[0][0] == "Starring"
                if natural and len(truth) <= self.settings.max_ground_truth:
                    found.append(combo)
                if size == self.settings.max_conditions:
                    continue
                for pair, n in self._pair_counts(sharing).items():
                    if n < 2 or pair in combo:
                        continue
                    key = tuple(sorted((*combo, pair)))
                    if key not in seen:
                        seen.add(key)
                        narrowed = truth & self.holders[pair]
                        following.append((key, narrowed, sharing & narrowed))
            if len(found) > 200 or not following:
                break
            level = sorted(following, key=lambda candidate: candidate[0])
        return found

    def _pair_counts(self, items) -> Counter:
        return Counter(
            (relation, value)
            for item in items
            for relation, values in self.items[item].attributes.items()
            for value in values
        )

    def condition_queries(self, histories: dict[str, list[str]], progress: bool = False) -> dict[str, list[dict]]:
        records: dict[str, list[dict]] = {"explicit": [], "implicit": [], "misinformed": []}
        used: set[tuple] = set()
        for user in tqdm(sorted(histories), desc="condition queries", unit="user", disable=not progress or None):
            options = [c for c in self.shared_conditions(histories[user]) if c not in used]
            self.rng.shuffle(options)
            for conditions in options[: self.settings.queries_per_user]:
                used.add(conditions)
                hideable = any(r in HIDDEN_RELATIONS for r, _ in conditions)
                task = ("explicit", "implicit", "misinformed")[len(used) % 3] if hideable else "explicit"
                record = getattr(self, f"_{task}")(user, list(conditions), histories[user])
                if record is not None:
                    record["data_idx"] = len(records[task])
                    records[task].append(record)
        return records

    def _base(self, user: str, conditions: list[tuple[str, str]], truth: set[str]) -> dict:
        ordered = sorted(truth, key=lambda i: self.items[i].title)
        return {
            "source_user": user,
            "condition_num": len(conditions),
            "movieCount": len(ordered),
            "movieSubset": [self.items[i].title for i in ordered],
            "movieSubsetId": [int(i) if i.isdigit() else i for i in ordered],
            "sharedRelationships": [list(c) for c in conditions],
        }

    def _explicit(self, user: str, conditions: list[tuple[str, str]], history: list[str]) -> dict:
        record = self._base(user, conditions, self.ground_truth(conditions))
        text = describe(conditions)
        record["direct_description_query"] = f"Recommend {text}."
        record["situational_description_query"] = self._phrase(
            self.rng.choice(SITUATIONS).format(text), [v for _, v in conditions]
        )
        return record

    def _implicit(self, user: str, conditions: list[tuple[str, str]], history: list[str]) -> dict | None:
        people = [c for c in conditions if c[0] in HIDDEN_RELATIONS]
        relation, value = self.rng.choice(people)
        truth = self.ground_truth(conditions)
        # only items whose first-listed value is the hidden one: "the lead actor of X" names one person
        pointing = {i for i in self.holders[(relation, value)] if self.items[i].attributes[relation][0] == value}
        references = sorted(set(history) & pointing) or sorted(pointing)
        if not references:
            return None
        reference = self.rng.choice(references)
        truth.discard(reference)  # the user already knows the item the query points through
        if not truth:
            return None
        hidden = f"the {ROLE_NOUNS[relation]} of {self.items[reference].title}"
        others = [c for c in conditions if c != (relation, value)]
        text = describe(others + [(relation, hidden)])
        record = self._base(user, conditions, truth)
        record["multihop_info"] = [{"movie": self.items[reference].title, "relation": relation, "person": value}]
        record["direct_description_query"] = f"Recommend {text}."
        keep = [v for _, v in others] + [self.items[reference].title]
        record["situational_description_query"] = self._phrase(self.rng.choice(SITUATIONS).format(text), keep)
        return record

    def _misinformed(self, user: str, conditions: list[tuple[str, str]], history: list[str]) -> dict | None:
        people = [c for c in conditions if c[0] in HIDDEN_RELATIONS]
        relation, value = self.rng.choice(people)
        truth = self.ground_truth(conditions)
        subject = self.rng.choice(sorted(self.holders[(relation, value)]))
        wrong = sorted({v for (r, v) in self.holders if r == relation} - set(self.items[subject].attributes[relation]))
        if not wrong:
            return None
        claimed = self.rng.choice(wrong)
        truth.discard(subject)
        if not truth:
            return None
        others = [c for c in conditions if c != (relation, value)]
        noun = ROLE_NOUNS[relation]
        query = (
            f"I loved {self.items[subject].title}, whose {noun} is {claimed}. "
            f"Recommend other {describe(others)} with the same {noun}."
        )
        record = self._base(user, conditions, truth)
        record["misinformed"] = [
            {"movie": self.items[subject].title, "relation": relation, "person": claimed, "original person": value}
        ]
        record["query"] = self._phrase(query, [self.items[subject].title, claimed])
        return record

    def _phrase(self, text: str, must_keep: list[str]) -> str:
        if self.rewrite is None:
            return text
        rewritten = self.rewrite(text)
        if rewritten and all(name.lower() in rewritten.lower() for name in must_keep):
            return rewritten.strip()
        return text

    # -- profile-based queries -----------------------------------------------------------------

    def interest_queries(
        self, histories: dict[str, list[str]], times: dict[str, list[int]] | None = None
    ) -> list[dict]:
        """Queries from item pairs users consumed back to back. With ``times`` (each history's timestamps),
        a pair or its follow-up counts only when strictly later (unless ``allow_tied_pairs``): the order of
        events in the same second is the tie rule's, not the user's."""
        followers: dict[tuple[str, str], list[str]] = defaultdict(list)
        next_items: dict[tuple[str, str], Counter] = defaultdict(Counter)
        strict = times is not None and not self.settings.allow_tied_pairs
        for user, items in sorted(histories.items()):
            stamps = times[user] if strict else [0] * len(items)
            for index, (a, b) in enumerate(zip(items[:-1], items[1:], strict=False)):
                if strict and stamps[index] == stamps[index + 1]:
                    continue
                followers[(a, b)].append(user)
                after = items[index + 2] if index + 2 < len(items) else None
                if (
                    after is not None
                    and after not in (a, b)
                    and not (strict and stamps[index + 2] == stamps[index + 1])
                ):
                    next_items[(a, b)][after] += 1
        records = []
        for pair, users in sorted(followers.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            users = sorted(set(users))
            following = [i for i, _ in next_items[pair].most_common(5)]
            if len(users) < self.settings.min_consecutive_users or not following:
                continue
            a, b = (self.items[i].title for i in pair)
            query = self.rng.choice(INTEREST_TEMPLATES).format(a=a, b=b)
            records.append(
                {
                    "Shared consecutive movies": [a, b],
                    "source_users": users,
                    "query & ground true": [
                        {
                            "reason": f"{len(users)} users watched these two back to back",
                            "query": query,
                            "movie subset": [self.items[i].title for i in following],
                        }
                    ],
                }
            )
        return records

    def demographics_queries(self, histories: dict[str, list[str]], users: dict[str, dict]) -> list[dict]:
        records = []
        for group_type in ("gender", "age", "occupation", "gender_age"):
            groups: dict[str, list[str]] = defaultdict(list)
            for user, profile in users.items():
                if user in histories:
                    groups[group_of(profile, group_type)].append(user)
            groups = {g: m for g, m in groups.items() if len(m) >= self.settings.min_group_users}
            if len(groups) < 2:
                continue
            counts = {g: Counter(i for u in m for i in set(histories[u])) for g, m in groups.items()}
            spread = Counter(i for c in counts.values() for i in c)
            for group, members in sorted(groups.items()):
                scores = {
                    i: (n / len(members)) * math.log(len(groups) / spread[i] + 1) for i, n in counts[group].items()
                }
                top = sorted(scores, key=lambda i: (-scores[i], i))[: self.settings.top_items]
                label = group_label(group, group_type)
                records.append(
                    {
                        "group_type": group_type,
                        "group": group,
                        "top_10_movies": [[int(i) if i.isdigit() else i, round(scores[i], 4)] for i in top],
                        "summary": f"{label} ({len(members)} users) distinctively watch "
                        + ", ".join(self.items[i].title for i in top[:3])
                        + ".",
                        "query & ground true": [
                            {
                                "reason": f"distinctive popular movies of {label}",
                                "query": self.rng.choice(DEMOGRAPHIC_TEMPLATES).format(who=label.lower()),
                                "movie subset": [self.items[i].title for i in top],
                            }
                        ],
                    }
                )
        return records
