"""A data folder's recorded prompt options are checked for the types prompts and rewards read, wherever they are
read: a prepared folder from elsewhere with ``"k": "5"`` or a string for ``"prompt"`` was a traceback."""

import json

import pytest

from rectune.benchmarks.recbench.grounding import ORDERS
from rectune.benchmarks.recbench.rerec import PROTOCOL
from rectune.core.io import DataError
from rectune.data.prompt_options import WORDS, recorded_prompt

RECORDED = {"with_history": False, "k": 5, "candidates": 10, "candidate_facts": False, "candidate_order": "retriever"}


def folder_with(tmp_path, stats):
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    return tmp_path / "test.jsonl"


def test_the_options_data_prep_records_are_read_back(tmp_path):
    assert recorded_prompt(folder_with(tmp_path, {"queries": {}, "prompt": RECORDED})) == RECORDED
    assert recorded_prompt(folder_with(tmp_path, {"prompt": None})) == {}
    assert recorded_prompt(tmp_path / "elsewhere" / "test.jsonl") == {}  # no stats.json: no options


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        ([RECORDED], "expected a JSON object, got list"),
        ({"prompt": "k=5"}, "field 'prompt': must be an object of prompt options, got 'k=5'"),
        ({"prompt": {**RECORDED, "k": "5"}}, "field 'prompt.k': must be a whole number of at least 1, got '5'"),
        ({"prompt": {**RECORDED, "candidates": 0}}, "field 'prompt.candidates': must be a whole number of at least 1"),
        # the authors' evaluator pads every answer to K titles: a K of 10**15 was a MemoryError blamed on the batch
        ({"prompt": {**RECORDED, "k": 10**15}}, "field 'prompt.k': a list of at most 1000 items, got 1000000000000000"),
        (
            {"prompt": {**RECORDED, "with_history": "no"}},
            "field 'prompt.with_history': must be true or false, got 'no'",
        ),
        ({"prompt": {**RECORDED, "protocol": 1}}, "field 'prompt.protocol': must be a string, got '1'"),
        (
            {"prompt": {**RECORDED, "protocol": "ReRec"}},
            "field 'prompt.protocol': 'ReRec' is none this RecTune knows ('rerec'); a folder prepared by a later",
        ),
        (
            {"prompt": {**RECORDED, "candidate_order": "score"}},
            "field 'prompt.candidate_order': 'score' is none this RecTune knows ('title' or 'retriever')",
        ),
    ],
)
def test_each_fault_names_stats_json_and_the_option(tmp_path, stats, message):
    with pytest.raises(DataError, match=rf"stats.json: {message.replace('(', '.').replace(')', '.')}"):
        recorded_prompt(folder_with(tmp_path, stats))


def test_the_words_checked_are_the_ones_data_prep_writes(tmp_path):
    assert WORDS == {"protocol": (PROTOCOL,), "candidate_order": ORDERS}
    rerec = {"with_history": False, "k": 1, "candidates": 20, "protocol": PROTOCOL}
    assert recorded_prompt(folder_with(tmp_path, {"prompt": rerec}))["protocol"] == "rerec"
