"""A recipe's values checked against the types their fields declare, before any parser sees them.

argparse converts and checks a value only when it is a string (the command line's are): the recipe's values
become its defaults, which it takes as they are. So ``lora_dropout: [1]``, ``max_steps: {a: 1}`` or
``lora_target_modules: false`` reached PEFT, TRL or RecTune's own checks as they were, each a ``TypeError``
or ``AttributeError`` there. A string is left to argparse, which converts it as it converts the command line's.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

from rectune.core.io import DataError

# mapping fields whose string names a JSON file (transformers reads it), where the others' string is the JSON itself
FILE_KEYS = ("accelerator_config", "fsdp_config", "deepspeed")
ALSO_TAKES = {  # fields whose library takes more than their annotation says
    "lora_target_modules": str,  # PEFT: one regular expression, or all-linear
    "scale_rewards": bool,  # TRL: true is group, false is none
}


def check_types(config: dict[str, Any], dataclass_types: tuple[type, ...], recipe: Path) -> None:
    """Refuse the first value of ``config`` (a recipe's keys, all known fields) of a type its field does not
    declare, naming the key and what it takes."""
    hints = {}
    for cls in dataclass_types:
        declared = typing.get_type_hints(cls)
        hints.update({field.name: declared.get(field.name, Any) for field in dataclasses.fields(cls)})
    for key, value in config.items():
        hint = hints.get(key, Any)
        if key in ALSO_TAKES and isinstance(value, ALSO_TAKES[key]):
            continue
        if isinstance(value, bool) and _matches(1, hint) and not _matches(value, hint):  # YAML's true is Python's 1
            raise DataError(recipe, f"key {key!r}: {str(value).lower()} is not a number")
        if isinstance(value, str):
            if _takes_mapping(hint) and key not in FILE_KEYS and not _json_object(value):
                raise DataError(recipe, f"key {key!r}: {value[:60]!r} is neither a mapping nor a JSON object's text")
            if _list_only(hint):  # argparse keeps a string given for a list as it is
                raise DataError(recipe, f"key {key!r}: {value[:60]!r} is not {_describe(hint)} (write [{value[:60]}])")
            continue  # argparse converts it (and refuses it in one line) as it converts the command line's
        if not _matches(value, hint):
            shown = "null" if value is None else repr(value)[:60]
            raise DataError(recipe, f"key {key!r}: {shown} is not {_describe(hint)}")


def _members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _takes_mapping(hint: Any) -> bool:
    return any(member is dict or typing.get_origin(member) is dict for member in _members(hint))


def _list_only(hint: Any) -> bool:
    members = [member for member in _members(hint) if member is not type(None)]
    return bool(members) and all(typing.get_origin(member) in (list, tuple, set) for member in members)


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` as YAML gives it is of the declared ``hint`` (unknown kinds of hint accept anything)."""
    if hint is Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, member) for member in args)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if origin in (list, tuple, set):
        return isinstance(value, list) and (not args or all(_matches(item, args[0]) for item in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str or (isinstance(hint, type) and issubclass(hint, enum.Enum)):
        return isinstance(value, str)  # an enum's word: its choices are checked with the parser's
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)  # TRL builds it from the mapping (a dataset of the mixture)
    return True


def _describe(hint: Any) -> str:
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", type(None): "null"}
    described = []
    for member in _members(hint):
        origin = typing.get_origin(member)
        if origin in (list, tuple, set):
            inner = typing.get_args(member)
            described.append(f"a list of {_describe(inner[0]).removeprefix('a ')}s" if inner else "a list")
        elif origin is dict or member is dict or dataclasses.is_dataclass(member):
            described.append("a mapping")
        else:
            described.append(words.get(member, getattr(member, "__name__", str(member))))
    return " or ".join(dict.fromkeys(described))
