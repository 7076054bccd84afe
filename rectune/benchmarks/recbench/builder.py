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
* **Explicit** queries state the conditions. **Implicit** queries replace one person (or the year)
  by a reference through another item ("the director of X"); X is left out of the ground truth.
  **Misinformed** queries attach a false claim ("Y, whose director is W") to an item Y that really
  has the hidden value; Y is left out of the ground truth.
* Both are *sound*: the hidden value appears nowhere in an implicit query, and a misinformed query
  states the true value nowhere (nor claims a value another condition names). A referenced item is
  named as a person writes it (``The English Patient (1996)``); for the Year relation it is named
  without its year, so only items whose title is unique in the catalog can be referenced.
* Profile-based queries: :mod:`~rectune.benchmarks.recbench.profile_queries`.

Records name items as a person writes them (``movieSubset`` too, as the release's query files do);
ids stay in ``movieSubsetId``. :attr:`BenchmarkBuilder.counts` explains the numbers of condition
queries: candidate sets found, removed by the ground-truth cap, removed as already used for
another user, not drawn (``queries_per_user``), and per task assigned and kept.

Query text comes from fixed templates chosen by a seeded generator, so a build is deterministic;
``rewrite`` may rephrase condition queries (e.g. with a local chat model), and a rewrite that drops
a condition's value or a referenced title, reveals a hidden value, or is no request (control characters,
or longer than :data:`MAX_REWRITE_CHARS` and thrice the template: a served model that ignores the token
limit) is discarded in favour of the template text.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from tqdm import tqdm

from rectune.benchmarks.recbench import profile_queries
from rectune.benchmarks.recbench.query_text import ROLE_NOUNS, SITUATIONS, describe
from rectune.core.io import CONTROL, RecTuneError
from rectune.data.catalog import read_item_file
from rectune.data.item_ids import release_id
from rectune.data.titles import CatalogItem, display_title, split_title, title_key

PERSON_RELATIONS = ("Director", "Starring", "Composer")
# relations an implicit or misinformed query can hide or falsify ("the director of X", "X, from 1990")
HIDDEN_RELATIONS = (*PERSON_RELATIONS, "Year")
MAX_REWRITE_CHARS = 600  # a rewrite in casual words is a sentence or two; the templates run 40 to 200 characters


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
        self.names = {item.id: display_title(item.title) for item in items}
        self.holders: dict[tuple[str, str], set[str]] = defaultdict(set)
        for item in items:
            for relation, values in item.attributes.items():
                for value in values:
                    self.holders[(relation, value)].add(item.id)
        keys = Counter(title_key(split_title(item.title)[0]) for item in items)
        self._unique_title = {item.id for item in items if keys[title_key(split_title(item.title)[0])] == 1}
        self.counts: Counter = Counter()

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
                if natural:
                    self.counts["candidates"] += 1
                    if len(truth) <= self.settings.max_ground_truth:
                        found.append(combo)
                    else:
                        self.counts["removed_by_ground_truth_cap"] += 1
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
            found = self.shared_conditions(histories[user])
            options = [c for c in found if c not in used]
            self.counts["removed_as_used_for_another_user"] += len(found) - len(options)
            self.rng.shuffle(options)
            self.counts["not_drawn"] += max(len(options) - self.settings.queries_per_user, 0)
            for conditions in options[: self.settings.queries_per_user]:
                used.add(conditions)
                hideable = any(r in HIDDEN_RELATIONS for r, _ in conditions)
                task = ("explicit", "implicit", "misinformed")[len(used) % 3] if hideable else "explicit"
                self.counts[f"{task}_assigned"] += 1
                record = getattr(self, f"_{task}")(user, list(conditions), histories[user])
                if record is not None:
                    record["data_idx"] = len(records[task])
                    records[task].append(record)
        return records

    def explain_counts(self, records: dict[str, list[dict]]) -> dict:
        """Why a build has as many condition queries as it has, for ``stats.json``."""
        counts = self.counts
        return {
            "candidate_condition_sets": counts["candidates"],
            "removed_by_ground_truth_cap": counts["removed_by_ground_truth_cap"],
            "removed_as_used_for_another_user": counts["removed_as_used_for_another_user"],
            "not_drawn_beyond_queries_per_user": counts["not_drawn"],
            "by_task": {
                task: {
                    "assigned": counts[f"{task}_assigned"],
                    "kept": len(records[task]),
                    "dropped_without_a_sound_reference": counts[f"{task}_assigned"] - len(records[task]),
                }
                for task in ("explicit", "implicit", "misinformed")
            },
            "settings": {
                "max_ground_truth": self.settings.max_ground_truth,
                "queries_per_user": self.settings.queries_per_user,
                "max_conditions": self.settings.max_conditions,
            },
            "why": "each user's condition sets shared by two of their items; sets with more matching items "
            "than max_ground_truth are dropped, a set already used for another user is not asked again, at "
            "most queries_per_user are drawn per user and dealt to explicit/implicit/misinformed in turn "
            "(explicit only when no condition can be hidden); an implicit or misinformed query is dropped when "
            "no referenced item keeps it sound",
        }

    def _base(self, user: str, conditions: list[tuple[str, str]], truth: set[str]) -> dict:
        ordered = sorted(truth, key=lambda i: self.names[i])
        return {
            "source_user": user,
            "condition_num": len(conditions),
            "movieCount": len(ordered),
            "movieSubset": [self.names[i] for i in ordered],
            "movieSubsetId": [release_id(i) for i in ordered],
            "sharedRelationships": [list(c) for c in conditions],
        }

    def reference(self, item_id: str, relation: str) -> str | None:
        """How a query names an item it points through: natural title; for ``Year`` without the year (a title
        carrying it would give the hidden value away or contradict a false one), so only a title unique in
        the catalog can be used."""
        if relation != "Year":
            return self.names[item_id]
        if item_id not in self._unique_title:
            return None
        return display_title(split_title(self.items[item_id].title)[0])

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
        others = [c for c in conditions if c != (relation, value)]

        def text(item_id: str) -> str:
            return describe(others + [(relation, f"the {ROLE_NOUNS[relation]} of {self.reference(item_id, relation)}")])

        def sound(item_id: str) -> bool:  # names the item, hides the value, leaves a ground truth
            return (
                self.reference(item_id, relation) is not None
                and value.casefold() not in text(item_id).casefold()
                and bool(truth - {item_id})
            )

        # only items whose first-listed value is the hidden one: "the lead actor of X" names one person
        pointing = {i for i in self.holders[(relation, value)] if self.items[i].attributes[relation][0] == value}
        references = sorted(i for i in set(history) & pointing if sound(i)) or sorted(i for i in pointing if sound(i))
        if not references:
            return None
        reference = self.rng.choice(references)
        truth.discard(reference)  # the user already knows the item the query points through
        record = self._base(user, conditions, truth)
        record["multihop_info"] = [{"movie": self.names[reference], "relation": relation, "person": value}]
        record["direct_description_query"] = f"Recommend {text(reference)}."
        keep = [v for _, v in others] + [self.reference(reference, relation)]
        record["situational_description_query"] = self._phrase(
            self.rng.choice(SITUATIONS).format(text(reference)), keep, hidden=[value]
        )
        return record

    def _misinformed(self, user: str, conditions: list[tuple[str, str]], history: list[str]) -> dict | None:
        people = [c for c in conditions if c[0] in HIDDEN_RELATIONS]
        relation, value = self.rng.choice(people)
        truth = self.ground_truth(conditions)
        others = [c for c in conditions if c != (relation, value)]
        named = {v.casefold() for _, v in others}
        noun = ROLE_NOUNS[relation]

        def query(item_id: str, claimed: str) -> str:
            return (
                f"I loved {self.reference(item_id, relation)}, whose {noun} is {claimed}. "
                f"Recommend other {describe(others)} with the same {noun}."
            )

        def sound(item_id: str) -> bool:  # the item is nameable, the true value unstated, a ground truth left
            return (
                self.reference(item_id, relation) is not None
                and value.casefold() not in query(item_id, "").casefold()
                and bool(truth - {item_id})
            )

        subjects = [i for i in sorted(self.holders[(relation, value)]) if sound(i)]
        if not subjects:
            return None
        subject = self.rng.choice(subjects)
        true_values = self.items[subject].attributes[relation]
        wrong = sorted(
            v for (r, v) in self.holders if r == relation and v not in true_values and v.casefold() not in named
        )
        if not wrong:
            return None
        claimed = self.rng.choice(wrong)
        truth.discard(subject)
        record = self._base(user, conditions, truth)
        record["misinformed"] = [
            {"movie": self.names[subject], "relation": relation, "person": claimed, "original person": value}
        ]
        reference = self.reference(subject, relation)
        record["query"] = self._phrase(query(subject, claimed), [reference, claimed], hidden=[value])
        return record

    def _phrase(self, text: str, must_keep: list[str], hidden: list[str] = ()) -> str:
        """The rewrite of ``text`` when it keeps every name, reveals no hidden value and is a request's length and
        plain text, else ``text``."""
        if self.rewrite is None:
            return text
        rewritten = self.rewrite(text)
        folded = (rewritten or "").casefold()
        if (
            rewritten
            and len(rewritten) <= max(MAX_REWRITE_CHARS, 3 * len(text))
            and not CONTROL.search(rewritten)
            and all(n.casefold() in folded for n in must_keep)
            and not any(v.casefold() in folded for v in hidden)
        ):
            return rewritten.strip()
        return text

    # -- profile-based queries (profile_queries.py) ----------------------------------------------

    def interest_queries(
        self, histories: dict[str, list[str]], times: dict[str, list[int]] | None = None
    ) -> list[dict]:
        return profile_queries.interest_queries(
            self.names, histories, self.rng, self.settings.min_consecutive_users, times, self.settings.allow_tied_pairs
        )

    def demographics_queries(self, histories: dict[str, list[str]], users: dict[str, dict]) -> list[dict]:
        return profile_queries.demographics_queries(
            self.names, histories, users, self.rng, self.settings.min_group_users, self.settings.top_items
        )
