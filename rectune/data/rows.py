"""Checking canonical rows field by field: :class:`RowChecker`, which every benchmark's row type uses.

``data_prep`` writes canonical rows (``test.jsonl``), ``train`` builds prompts from the same fields
and ``evaluate`` scores completions against them. A row's ``benchmark`` field names its benchmark,
whose row type (``rectune/benchmarks/<name>/rows.py``) documents and validates every field; a bad row
raises :class:`rectune.core.io.DataError` naming file, line and field. Loading a rows file, which finds
the benchmark in the registry, is :func:`rectune.benchmarks.load_rows`.
"""

from __future__ import annotations

import math
import os

from rectune.core.io import CONTROL, DataError


def _is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_pairs(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(pair, list) and len(pair) == 2 and _is_strings(pair)
                                           for pair in value)  # fmt: skip


class RowChecker:
    """Typed access to a raw row's fields; every failure names file, line, row id and field."""

    def __init__(self, raw: dict, cls: type, path: str | os.PathLike, line: int | None):
        self.raw, self.path, self.line = raw, path, line
        unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
        if unknown:
            raise self.fail(unknown[0], "unknown field")

    def fail(self, name: str, message: str) -> DataError:
        row_id = self.raw.get("id") if isinstance(self.raw.get("id"), str) else None
        label = f"row {row_id!r}, " if row_id else ""
        return DataError(self.path, f"{label}field {name!r}: {message}", line=self.line)

    def string(self, name: str, allowed: tuple[str, ...] | None = None, optional: bool = False) -> str | None:
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, "missing" if value is None else f"must be a non-empty string, got {value!r}")
        if allowed and value not in allowed:
            raise self.fail(name, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def number(self, name: str, optional: bool = False) -> float | None:
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not _is_finite_number(value):
            raise self.fail(name, f"must be a finite number, got {value!r}")
        return value

    def numbers_in(self, name: str, entries: list[dict], keys: tuple[str, ...], where: str = "entry") -> None:
        """Each of ``keys`` that an entry of ``entries`` (this field's objects) holds is a finite number (a rating
        of ``"five"`` or NaN would move every score computed from it)."""
        for index, entry in enumerate(entries):
            for key in keys:
                if key in entry and not _is_finite_number(entry[key]):
                    raise self.fail(name, f"{where} {index}: {key!r} must be a finite number, got {entry[key]!r}")

    def count(self, name: str, default: int) -> int:
        value = self.raw.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.fail(name, f"must be a non-negative integer, got {value!r}")
        return value

    def strings(self, name: str, optional: bool = True, one_line: bool = False) -> list[str]:
        """A list of strings; with ``one_line`` (titles, ids) none may hold a line break or control character."""
        value = self.raw.get(name, [] if optional else None)
        if not _is_strings(value):
            raise self.fail(name, "missing" if value is None else "must be a list of strings")
        if one_line:
            self._one_line(name, value)
        return value

    def _one_line(self, name: str, values: list[object], key: str | None = None) -> None:
        if not CONTROL.search("".join(text for text in values if isinstance(text, str))):
            return  # one search for the whole list; the entry is named below when one fails
        for index, text in enumerate(values):
            if isinstance(text, str) and (bad := CONTROL.search(text)):
                where = f"entry {index}" + (f" {key!r}" if key else "")
                raise self.fail(name, f"{where} holds a control character ({bad.group()!r})")

    def pairs(self, name: str) -> list[list[str]]:
        value = self.raw.get(name, [])
        if not _is_pairs(value):
            raise self.fail(name, "must be a list of [relation, value] string pairs")
        return value

    def objects(self, name: str, required_keys: tuple[str, ...] = (), optional: bool = False) -> list[dict] | None:
        """A list of objects each holding ``required_keys``; an ``id`` or ``title`` among them is one line."""
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(name, "missing" if value is None else "must be a list of objects")
        for index, entry in enumerate(value):
            for key in required_keys:
                if key not in entry:
                    raise self.fail(name, f"entry {index} has no {key!r}")
        self.strings_in(name, value, ("id", "title"))
        for key in ("id", "title"):
            self._one_line(name, [entry.get(key) for entry in value], key)
        return value

    def strings_in(
        self, name: str, entries: list[dict], keys: tuple[str, ...], where: str | None = "entry", empty: bool = False
    ) -> None:
        """Each of ``keys`` that an entry of ``entries`` (this field's objects; ``where`` None: its one object)
        holds is a string, non-empty unless ``empty`` (an id of ``[7]`` or a title of ``true`` reached the
        prompts and the scorer's sets)."""
        for index, entry in enumerate(entries):
            for key in keys:
                if key in entry and not (isinstance(entry[key], str) and (empty or entry[key].strip())):
                    kind = "a string" if empty else "a non-empty string"
                    place = f"{where} {index}: " if where else ""
                    raise self.fail(name, f"{place}{key!r} must be {kind}, got {entry[key]!r}")

    def scale(self, name: str = "scale") -> list[float] | None:
        """An optional rating scale ``[lowest, highest, step]`` (``[0.5, 5, 0.5]``: half stars)."""
        value = self.raw.get(name)
        if value is None:
            return None
        numbers = (
            isinstance(value, list)
            and len(value) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        )
        if not numbers or not (0 <= value[0] < value[1] and value[2] > 0):
            raise self.fail(name, f"must be [lowest, highest, step] with lowest < highest, got {value!r}")
        return [float(v) for v in value]

    def object(self, name: str, required_keys: tuple[str, ...] = (), optional: bool = False) -> dict | None:
        value = self.raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, dict):
            raise self.fail(name, "missing" if value is None else "must be an object")
        for key in required_keys:
            if key not in value:
                raise self.fail(name, f"has no {key!r}")
        self.strings_in(name, [value], ("id", "title"), where=None)
        for key in ("id", "title"):
            if isinstance(value.get(key), str) and (bad := CONTROL.search(value[key])):
                raise self.fail(name, f"{key!r} holds a control character ({bad.group()!r})")
        return value


# What RFT label columns may hold: the rewards read them as they are, mid-training, for every completion.
LABEL_KINDS = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "strings": (_is_strings, "a list of strings"),
    "pairs": (_is_pairs, "a list of [relation, value] string pairs"),
    "numbers": (lambda v: isinstance(v, list) and all(_is_finite_number(x) for x in v), "a list of finite numbers"),
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
}


def label_kind_problem(
    labels: dict, kinds: dict[str, str], tasks: tuple[str, ...], optional: tuple[str, ...] = ()
) -> str | None:
    """The first label column of ``kinds`` (column -> a ``LABEL_KINDS`` name) that ``labels`` lacks or holds
    in another shape, as ``field 'NAME': …``, or a ``task`` not among ``tasks``; columns in ``optional`` may
    be absent or null."""
    if "task" not in labels:
        return "field 'task': missing (needed by the rewards)"
    if labels["task"] not in tasks:
        return f"field 'task': must be one of {', '.join(tasks)}, got {str(labels['task'])[:60]!r}"
    for name, kind in kinds.items():
        value = labels.get(name)
        if value is None and name in optional:
            continue
        if name not in labels:
            return f"field {name!r}: missing (needed by the rewards)"
        test, words = LABEL_KINDS[kind]
        if not test(value):
            return f"field {name!r}: must be {words}, got {str(value)[:60]!r}"
    return None
