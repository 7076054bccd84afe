import gc
import json
import subprocess
import sys

import pytest

from rectune.core.gc_pause import collection_paused
from rectune.evaluation import scoring


def test_the_collector_is_off_inside_and_back_after_errors_and_nesting():
    assert gc.isenabled()
    with pytest.raises(ValueError), collection_paused():
        assert not gc.isenabled()
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause ends with the outer one
        raise ValueError
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_that_was_off_off():
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_scoring_runs_with_the_collector_paused(tmp_path, monkeypatch):
    row = {"id": "q", "benchmark": "recbench+", "domain": "movie", "task": "explicit", "query": "q",
           "ground_truth": ["Heat (1995)"], "ground_truth_ids": ["1"]}  # fmt: skip
    (tmp_path / "test.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "catalog.jsonl").write_text(json.dumps({"id": "1", "title": "Heat (1995)"}) + "\n")
    (tmp_path / "kg.jsonl").write_text(json.dumps({"item_id": "1", "relation": "genre", "value": "Crime"}) + "\n")
    (tmp_path / "predictions.jsonl").write_text(json.dumps({"id": "q", "completion": "Heat"}) + "\n")
    seen = []
    load_answers = scoring.load_answers
    monkeypatch.setattr(scoring, "load_answers", lambda path: seen.append(gc.isenabled()) or load_answers(path))
    report = scoring.score_files(tmp_path / "test.jsonl", tmp_path / "predictions.jsonl", None)
    assert seen == [False] and gc.isenabled()
    assert report["overall"]["recall"] == 1.0


def test_a_run_freezes_what_is_loaded_and_collects_young_objects_less_often():
    # in a process of its own: what run() sets lasts for the process
    probe = (
        "import gc; from rectune.core.cli import run; before = gc.get_freeze_count(); "
        "run(lambda: None); print(before, gc.get_freeze_count() > 1000, gc.get_threshold())"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    # nothing frozen before; the modules rectune.core.cli loaded frozen; young collections every 10,000, not 700
    assert result.stdout.split("\n")[0] == "0 True (10000, 10, 10)"
