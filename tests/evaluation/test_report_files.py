"""Reports read back for comparison: every shape compare reads is checked first, each fault one line naming
the field or per-query record (a hand-edited or foreign report.json was a traceback mid-bootstrap)."""

import json

import pytest

from rectune.core.io import DataError
from rectune.evaluation.report_files import load_reports, report_problem, split_by_difficulty


def report(**changes):
    """A RecBench+ report of two queries, as evaluate/run.py writes it, with ``changes`` applied."""
    per_query = [
        {"id": "movie/explicit/1", "task": "explicit", "precision": 0.5, "recall": 1.0, "cmr": -1, "ftr": 0.0},
        {"id": "movie/explicit/2", "task": "explicit", "precision": 0.0, "recall": 0.0, "cmr": 0.25, "ftr": 1.0},
    ]
    summary = {"n": 2, "precision": 0.25, "recall": 0.5, "cmr": 0.25, "ftr": 0.5}
    base = {"benchmark": "recbench+", "metrics": ["precision", "recall", "cmr", "ftr"], "k": 5,
            "overall": summary, "by_task": {"explicit": summary}, "per_query": per_query, "config": {}}  # fmt: skip
    return {**base, **changes}


def llmrec_report(**fields):
    """An LLMRec report of one direct-recommendation query, its record changed by ``fields``."""
    record = {"id": "direct/U0", "task": "direct", "na": False, "error": None, "rank": 0, "text": None, **fields}
    return report(benchmark="llmrec", metrics=["hr@1"], per_query=[record], overall={"n": 1}, by_task={})


def with_record(index, **fields):
    records = [dict(r) for r in report()["per_query"]]
    records[index].update(fields)
    return report(per_query=records)


FAULTS = {
    "metrics of numbers": (report(metrics=[1, 2]), "'metrics' must be a list of metric names"),
    "k as text": (report(k="5"), "'k' must be a positive whole number, not '5'"),
    "k of 0": (report(k=0), "'k' must be a positive whole number, not 0"),
    "no n": (
        report(by_task={"explicit": {"precision": 0.25}}),
        "by_task.explicit: 'n' must be a count of queries, not None",
    ),
    "n of 2.5": (report(overall={"n": 2.5}), "overall: 'n' must be a count of queries, not 2.5"),
    "a bool for a metric": (report(overall={"n": 2, "recall": True}), "overall: 'recall' is True, not a number"),
    "benchmark as a number": (report(benchmark=3), "'benchmark' must be a benchmark's name, not 3"),
    "an unknown benchmark": (report(benchmark="mybench"), "unknown benchmark 'mybench'"),
    "a data hash that is no string": (
        report(config={"predictions_key": {"data_sha256": 5}}),
        "'config.predictions_key' must be an object whose 'data_sha256' is a string",
    ),
    "a record without id": (with_record(1, id=None), "per_query record 2: no 'id' string (nor a 'group' of its task)"),
    "an id twice": (with_record(1, id="movie/explicit/1"), "per_query record 2: 'movie/explicit/1' is scored twice"),
    "a per-query score as text": (
        with_record(0, recall="1.0"),
        "per_query record 1 (movie/explicit/1): 'recall' is '1.0', not a number",
    ),
    "records of another benchmark": (
        report(benchmark="perrecbench"),
        "per_query record 1 (movie/explicit/1): no perrecbench scores (KeyError: 'tau')",
    ),
    # an LLMRec rank of -1 was a ZeroDivisionError in NDCG: a traceback
    "a rank below 0": (
        llmrec_report(rank=-1),
        "per_query record 1 (direct/U0): no llmrec scores (ValueError: 'rank' must be a whole number of at least 0 "
        "or null, got -1)",
    ),
    "a rank of 2.5": (llmrec_report(rank=2.5), "got 2.5)"),
}


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_each_fault_of_a_report_is_named(case):
    faulty, message = FAULTS[case]
    assert report_problem(report()) is None
    assert message in report_problem(faulty)


def test_an_error_whose_square_overflows_is_read_as_inf():
    """A float squared with ``**`` raises OverflowError (a traceback); multiplied, it is inf, which a report's
    numbers may be (an overflowed metric), as NaN stands for an undefined one."""
    assert report_problem(llmrec_report(task="rating", error=1e200)) is None


def test_load_reports_names_the_file_and_the_fault(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(with_record(0, recall="1.0")))
    with pytest.raises(DataError, match=r"run/report.json: not a RecTune report \(per_query record 1 "):
        load_reports([tmp_path / "run"])


def test_a_report_given_twice_is_one_line_not_a_row_compared_with_itself(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(report()))
    (tmp_path / "link").symlink_to(tmp_path / "run")
    for twice in ([tmp_path / "run", tmp_path / "run"], [tmp_path / "run", tmp_path / "link/report.json"]):
        with pytest.raises(DataError) as caught:
            load_reports(twice)
        assert str(caught.value) == (
            f"{twice[1] if twice[1].name == 'report.json' else twice[1] / 'report.json'}: given twice ({twice[0]} and "
            f"{twice[1]}); name each report once"
        )
    assert list(load_reports([tmp_path / "run"])) == ["run"]


def tiers(**changes):
    records = [{**r, "difficulty": d} for r, d in zip(report()["per_query"], ("easy", "hard"), strict=True)]
    by_tier = {"explicit": {"easy": {"n": 1, "recall": 1.0}, "hard": {"n": 1, "recall": 0.0}}}
    return report(**{"per_query": records, "by_task_difficulty": by_tier, **changes})


def test_difficulty_tiers_are_checked_and_their_faults_name_the_file(tmp_path):
    split = split_by_difficulty(tiers(), "r.json")
    assert split["by_task"] == {"explicit/easy": {"n": 1, "recall": 1.0}, "explicit/hard": {"n": 1, "recall": 0.0}}
    assert [r["task"] for r in split["per_query"]] == ["explicit/easy", "explicit/hard"]
    with pytest.raises(DataError, match=r"r.json: not a RecTune report \('by_task_difficulty' must map tasks"):
        split_by_difficulty(tiers(by_task_difficulty={"explicit": "easy"}), "r.json")
    with pytest.raises(DataError, match=r"by_task_difficulty.explicit/hard: 'n' must be a count of queries"):
        split_by_difficulty(tiers(by_task_difficulty={"explicit": {"hard": {"recall": 0.0}}}), "r.json")
    (tmp_path / "report.json").write_text(json.dumps(report()))  # no tiers at all
    with pytest.raises(DataError, match=r"report.json: has no difficulty tiers"):
        load_reports([tmp_path / "report.json"], by_difficulty=True)
