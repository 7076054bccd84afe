"""The prompt options data_prep records in a data folder's ``stats.json``, which training and evaluation reuse.

A prepared folder travels (a colleague's, a download), so its options are checked for the types the prompts and
rewards read: ``"k": "5"`` reached a slice of the candidate list, and a ``"prompt"`` that was a string or a list
an ``AttributeError``, in training and in evaluation alike.
"""

from __future__ import annotations

import os
from pathlib import Path

from rectune.core.cli import K_MAX
from rectune.core.io import DataError, read_json_object

# option -> its type; a null option is as good as absent. Other keys are kept as they are (a later version's).
OPTIONS = {
    "with_history": bool,
    "k": int,
    "candidates": int,
    "candidate_facts": bool,
    "candidate_order": str,
    "protocol": str,
}
# option -> the words that name something (RecBench+'s rerec.PROTOCOL and grounding.ORDERS): another word, a later
# version's protocol or a hand edit's typo, would be prompted and scored as no protocol at all, without a word.
WORDS = {"protocol": ("rerec",), "candidate_order": ("title", "retriever")}


def recorded_prompt(data_file: str | os.PathLike) -> dict:
    """The prompt options recorded in ``stats.json`` beside ``data_file`` (a rows file), or {} where none are."""
    stats = Path(data_file).parent / "stats.json"
    if not stats.is_file():
        return {}
    prompt = read_json_object(stats).get("prompt") or {}
    if not isinstance(prompt, dict):
        raise DataError(stats, f"field 'prompt': must be an object of prompt options, got {str(prompt)[:60]!r}")
    for key, kind in OPTIONS.items():
        value = prompt.get(key)
        if value is None:
            continue
        wrong = not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 1))
        if wrong:
            what = {bool: "true or false", int: "a whole number of at least 1", str: "a string"}[kind]
            raise DataError(stats, f"field 'prompt.{key}': must be {what}, got {str(value)[:60]!r}")
        if key == "k" and value > K_MAX:
            raise DataError(stats, f"field 'prompt.k': a list of at most {K_MAX} items, got {str(value)[:60]}")
        if key in WORDS and value not in WORDS[key]:
            known = " or ".join(repr(word) for word in WORDS[key])
            raise DataError(stats, f"field 'prompt.{key}': {value[:60]!r} is none this RecTune knows ({known}); "
                            "a folder prepared by a later version?")  # fmt: skip
    return prompt


def prompt_variant(data: str | os.PathLike, with_history: bool | None, k: int | None) -> dict:
    """The prompt settings: as given, else as data_prep recorded them for the training files (grounded
    prompts, ``candidates``, only ever as recorded: the candidates live in the rows)."""
    recorded = recorded_prompt(data)
    return {
        **recorded,
        "with_history": recorded.get("with_history", False) if with_history is None else with_history,
        "k": recorded.get("k") if k is None else k,
    }
