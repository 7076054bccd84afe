"""What YAML a recipe may hold before any parser builds it: no aliases, no key twice, no deep nesting."""

from __future__ import annotations

from pathlib import Path

import yaml

from rectune.core.io import LONE_SURROGATE, DataError

# the deepest a recipe's values go is a dataset's keyword arguments, four levels down
MAX_DEPTH = 32


def check_recipe_yaml(recipe: Path, text: str) -> None:
    """Refuse a YAML alias (``*name``): a few lines can expand into gigabytes (the "billion laughs"), and recipes
    need none. Refuse a key given twice in one mapping: YAML keeps the last without a word, so a value added at
    the bottom of a long recipe would quietly replace the one above it. Refuse half a UTF-16 pair (``"\\uDCFF"``).
    Refuse nesting past ``MAX_DEPTH``: PyYAML's scanner is quadratic in the depth of flow collections, and 200 KB
    of ``[`` kept a run busy for minutes before Python's stack ran out."""
    open_nodes: list[list] = []  # per open collection: [a mapping's keys seen (key: line) or None, next is a key]
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise DataError(recipe, f"YAML alias *{event.anchor}: write the value out instead", line)
        if isinstance(event, yaml.ScalarEvent) and LONE_SURROGATE.search(event.value):
            raise DataError(recipe, f"{ascii(event.value)[:80]}: holds half of a UTF-16 pair, no character", line)
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            open_nodes.pop()
        elif not isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            continue  # the stream's and documents' own events
        parent = open_nodes[-1] if open_nodes else None
        if isinstance(event, yaml.ScalarEvent) and parent and parent[0] is not None and parent[1]:
            if event.value in parent[0]:
                first = parent[0][event.value]
                raise DataError(recipe, f"key {event.value!r} given twice (first on line {first}); keep one", line)
            parent[0][event.value] = line
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(open_nodes) == MAX_DEPTH:
                raise DataError(recipe, f"values nested more than {MAX_DEPTH} deep: no recipe needs that", line)
            open_nodes.append([{} if isinstance(event, yaml.MappingStartEvent) else None, True])
        elif parent and parent[0] is not None:  # a key or a value ended: the parent mapping expects the other
            parent[1] = not parent[1]
