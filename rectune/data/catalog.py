"""Catalog (``catalog.jsonl``) and item knowledge graph (``kg.jsonl``) files.

``catalog.jsonl``: one ``{"id": str, "title": str, "attributes": {...}}`` per item.
``kg.jsonl``: one ``{"item_id": str, "relation": str, "value": str}`` triple per line.
Relations and values compare case-, accent- and punctuation-insensitively.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from rectune.core.io import DataError, numbered_jsonl, require_file, require_strings
from rectune.data.titles import CatalogItem, title_key


def read_item_file(
    path: str | os.PathLike, field: str, valid: Callable[[object], bool], expected: str, default: object = None
) -> list[CatalogItem]:
    """``{"id", "title", field}`` rows as items (``field`` becomes their attributes); ids must be unique and
    a bad row fails with file, line and field."""
    items, seen = [], set()
    for line, raw in numbered_jsonl(path):
        require_strings(raw, ("id", "title"), path, line, one_line=True)
        value = raw.get(field, default)
        if not valid(value):
            raise DataError(path, f"field {field!r}: {expected}", line=line)
        if raw["id"] in seen:
            raise DataError(path, f"field 'id': duplicate id {raw['id']!r}", line=line)
        seen.add(raw["id"])
        items.append(CatalogItem(raw["id"], raw["title"], value))
    return items


def load_catalog(path: str | os.PathLike) -> list[CatalogItem]:
    return read_item_file(path, "attributes", lambda value: isinstance(value, dict), "must be an object", default={})


def catalog_rows(items: list[CatalogItem]) -> list[dict]:
    return [{"id": item.id, "title": item.title, "attributes": item.attributes} for item in items]


class KnowledgeGraph:
    """Item → relation → values, for checking whether an item meets a query's conditions."""

    def __init__(self, triples: list[tuple[str, str, str]] = ()):
        self._facts: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self._by_fact: dict[tuple[str, str], set[str]] | None = None
        for item_id, relation, value in triples:
            self.add(item_id, relation, value)

    def add(self, item_id: str, relation: str, value: str) -> None:
        self._by_fact = None
        self._facts[item_id][relation_key(relation)].add(title_key(value))

    def triples(self) -> list[tuple[str, str, str]]:
        return sorted((i, r, v) for i, rels in self._facts.items() for r, vals in rels.items() for v in vals)

    def satisfies(self, item_id: str, conditions: list[list[str]]) -> bool:
        """The KG holds every condition's value for ``item_id``."""
        return self.count_met([item_id], conditions)[0] == 1

    def count_met(self, item_ids: list[str], conditions: list[list[str]]) -> tuple[int, int]:
        """(items that satisfy every condition, items whose relations the KG covers): the conditions keyed once."""
        keyed = [(relation_key(rel), title_key(value)) for rel, value in conditions]
        satisfied = covered = 0
        for item_id in item_ids:
            facts = self._facts.get(item_id)
            if facts is None:
                covered += not keyed
                satisfied += not keyed
                continue
            meets = True
            for rel, value in keyed:
                values = facts.get(rel)
                if values is None:  # an uncovered relation: neither covered nor satisfied
                    break
                meets = meets and value in values
            else:
                covered += 1
                satisfied += meets
        return satisfied, covered

    def items_meeting(self, conditions: list[list[str]]) -> set[str]:
        """Every item the KG says meets all ``conditions`` (none when there are no conditions)."""
        if self._by_fact is None:  # built once: a release's queries each look up a few facts
            self._by_fact = defaultdict(set)
            for item_id, relations in self._facts.items():
                for relation, values in relations.items():
                    for value in values:
                        self._by_fact[(relation, value)].add(item_id)
        found = [self._by_fact.get((relation_key(rel), title_key(value)), set()) for rel, value in conditions]
        return set.intersection(*found) if found else set()

    def facts(self, item_id: str) -> list[tuple[str, str]]:
        """``item_id``'s (relation, value) pairs, sorted, in the KG's normalised spelling."""
        return sorted((rel, value) for rel, values in self._facts.get(item_id, {}).items() for value in values)

    def __len__(self) -> int:
        return sum(len(vals) for rels in self._facts.values() for vals in rels.values())


@functools.lru_cache(maxsize=1 << 12)
def relation_key(relation: str) -> str:
    return title_key(relation).replace(" ", "_")


def load_kg(path: str | os.PathLike) -> KnowledgeGraph:
    kg = KnowledgeGraph()
    for line, raw in numbered_jsonl(path, allow_empty=True):
        require_strings(raw, ("item_id", "relation", "value"), path, line)
        kg.add(raw["item_id"], raw["relation"], raw["value"])
    return kg


def kg_rows(kg: KnowledgeGraph) -> list[dict]:
    return [{"item_id": i, "relation": r, "value": v} for i, r, v in kg.triples()]


def beside(data_path: str | os.PathLike, name: str, override: str | os.PathLike | None) -> Path:
    """``override`` if given, else the file ``name`` in the folder of ``data_path``."""
    path = Path(override) if override else Path(data_path).parent / name
    require_file(path, f"file not found (needed beside {data_path}; pass it explicitly with a flag)")
    return path
