"""Malformed reports, weights and server JSON of any size are one line, never a traceback."""

import json
import shutil

import pytest
from conftest import run_script
from test_hostile import ask, one_line, raw, send  # noqa: F401 (raw: the fixture of hostile servers)

from rectune.core.io import RecTuneError

SUMMARY = {"n": 1, "precision": 0.5, "recall": 0.5}
MALFORMED_REPORTS = {
    "overall not an object": {"overall": [1], "by_task": {}},
    "a task summary not an object": {"overall": SUMMARY, "by_task": {"explicit": "0.5"}},
    "a value not a number": {"overall": {**SUMMARY, "recall": "high"}, "by_task": {}},
    "per_query not records": {"overall": SUMMARY, "by_task": {}, "per_query": [["a", 1]]},
    "config not an object": {"overall": SUMMARY, "by_task": {}, "config": "x"},
}


@pytest.mark.parametrize("case", sorted(MALFORMED_REPORTS))
def test_compare_on_a_malformed_report_is_one_line(tmp_path, case):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder, report in ((good, {"overall": SUMMARY, "by_task": {}}), (bad, MALFORMED_REPORTS[case])):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(report))
    result = run_script("evaluate/compare.py", good, bad, "--out", tmp_path / "comparison", check=False)
    one_line(result, "bad/report.json: not a RecTune report")


HUGE_NUMBER = b'{"choices": [{"message": {"content": "Heat"}}], "usage": {"prompt_tokens": ' + b"9" * 5000 + b"}}"


def test_a_5000_digit_number_in_a_servers_answer_is_an_unusable_answer(raw):  # noqa: F811
    endpoint = raw(lambda handler, n: send(handler, HUGE_NUMBER))
    with pytest.raises(RecTuneError, match="not JSON .* after 2 tries"):
        ask(endpoint.url, retries=1)


def test_a_5000_digit_number_in_a_refusal_is_one_line(raw, tmp_path, movie_data):  # noqa: F811
    endpoint = raw(lambda handler, n: send(handler, b'{"error": {"code": ' + b"9" * 5000 + b"}}", status=404))
    with pytest.raises(RecTuneError, match="404") as caught:
        ask(endpoint.url, retries=0)
    assert "\n" not in str(caught.value)


def test_merging_a_cut_adapter_is_one_line(tmp_path, adapters):
    cut = tmp_path / "cut"
    shutil.copytree(adapters[1], cut)
    weights = cut / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    result = run_script("train/merge.py", "--adapters", adapters[0], cut, "--out", tmp_path / "merged", check=False)
    one_line(result, "cut: adapter_model.safetensors is cut short")
    assert not (tmp_path / "merged").exists()
