"""Paired bootstrap intervals on hand-made per-query tables (values computed by hand below)."""

import random

import pytest

from rectune.core.io import DataError
from rectune.evaluation.bootstrap import paired_differences
from rectune.evaluation.compare import comparison_rows, markdown, metric_specs
from rectune.evaluation.report_files import split_by_difficulty as by_difficulty


def recbench_report(recalls, tasks=None):
    tasks = tasks or ["explicit"] * len(recalls)
    per_query = [
        {"id": f"q{i}", "task": t, "precision": r, "recall": r, "cmr": None, "ftr": 0.0}
        for i, (r, t) in enumerate(zip(recalls, tasks, strict=True))
    ]
    summary = {"n": len(recalls), "precision": sum(recalls) / len(recalls), "recall": sum(recalls) / len(recalls)}
    return {
        "benchmark": "recbench+",
        "overall": summary,
        "by_task": {t: summary for t in dict.fromkeys(tasks)},
        "per_query": per_query,
    }


def test_identical_checkpoints_give_an_interval_of_exactly_zero():
    rng = random.Random(0)
    report = recbench_report([rng.random() for _ in range(50)])
    diff = paired_differences(report, report, ["explicit"])["overall"]
    assert (diff["recall"].delta, diff["recall"].low, diff["recall"].high) == (0.0, 0.0, 0.0)
    assert not diff["recall"].excludes_zero
    assert "cmr" not in diff  # no query has a CMR value


def test_a_constant_shift_is_recovered_exactly():
    rng = random.Random(1)
    base = [rng.random() * 0.5 for _ in range(40)]
    shifted = [r + 0.1 for r in base]
    diff = paired_differences(recbench_report(shifted), recbench_report(base), ["explicit"])["explicit"]["recall"]
    # paired: every resample's difference is the mean of 0.1s
    assert diff.delta == pytest.approx(0.1) and diff.low == pytest.approx(0.1) and diff.high == pytest.approx(0.1)
    assert diff.excludes_zero


def test_a_noisy_shift_is_recovered_within_its_interval():
    rng = random.Random(2)
    base = [rng.random() for _ in range(400)]
    other = [r + 0.1 + rng.gauss(0, 0.2) for r in base]
    diff = paired_differences(recbench_report(other), recbench_report(base), ["explicit"], seed=3)["overall"]["recall"]
    assert diff.low < 0.1 < diff.high and diff.excludes_zero
    # the interval is about 2 * 1.96 * 0.2 / sqrt(400) = 0.039 wide
    assert 0.03 < diff.high - diff.low < 0.05
    again = paired_differences(recbench_report(other), recbench_report(base), ["explicit"], seed=3)
    assert again["overall"]["recall"] == diff  # seeded


def test_three_queries_by_hand():
    # recall 1, 0, 0 against 0, 0, 0: the difference is 1/3; a resample holds 0 to 3 copies of the hit,
    # so every resampled difference is 0, 1/3, 2/3 or 1 and the interval lies within [0, 1].
    diff = paired_differences(recbench_report([1, 0, 0]), recbench_report([0, 0, 0]), ["explicit"])["overall"]
    assert diff["recall"].delta == pytest.approx(1 / 3)
    assert 0.0 <= diff["recall"].low <= 1 / 3 <= diff["recall"].high <= 1.0


def test_rmse_is_the_root_of_the_mean_squared_error():
    def report(errors):
        per_query = [{"id": f"r{i}", "task": "rating", "na": e is None, "error": e, "rank": None, "text": None}
                     for i, e in enumerate(errors)]  # fmt: skip
        return {"benchmark": "llmrec", "overall": {"n": 2}, "by_task": {"rating": {"n": 2}}, "per_query": per_query}

    # errors 1 and -1: RMSE sqrt((1 + 1) / 2) = 1, MAE 1; errors 0 and 0: both 0
    diff = paired_differences(report([1.0, -1.0]), report([0.0, 0.0]), ["rating"])["rating"]
    assert diff["rmse"].delta == pytest.approx(1.0) and diff["mae"].delta == pytest.approx(1.0)
    assert diff["na_rate"].delta == 0.0 and "bleu4" not in diff  # text metrics get no interval


def test_perrecbench_resamples_groups_and_leaves_failed_ones_out_of_parsed_tau():
    def report(taus, failed):
        per_query = [{"group": f"g{i}", "task": "listwise", "difficulty": "easy", "group_size": 3, "tau": t,
                      "failed": f} for i, (t, f) in enumerate(zip(taus, failed, strict=True))]  # fmt: skip
        return {"benchmark": "perrecbench", "overall": {"n": 2}, "by_task": {"listwise": {"n": 2}},
                "per_query": per_query}  # fmt: skip

    # tau 1 and 0 (the 0 a failure) against 0.5 and 0.5: tau 0.5 - 0.5 = 0; parsed tau 1 - 0.5 = 0.5; failures 0.5
    diff = paired_differences(report([1.0, 0.0], [False, True]), report([0.5, 0.5], [False, False]), ["listwise"])
    overall = diff["overall"]
    assert overall["tau"].delta == pytest.approx(0.0)
    assert overall["tau_parsed"].delta == pytest.approx(0.5)
    assert overall["failure_rate"].delta == pytest.approx(0.5)


def perrec_tiers_report(taus):
    """Pairwise groups g0-g3: g0, g1 easy, g2, g3 hard, with these taus."""
    tiers = ["easy", "easy", "hard", "hard"]
    per_query = [{"group": f"g{i}", "task": "pairwise", "difficulty": d, "group_size": 2, "tau": t, "failed": False}
                 for i, (t, d) in enumerate(zip(taus, tiers, strict=True))]  # fmt: skip
    tier_summary = {d: {"n": 2, "tau": sum(taus[i] for i in range(4) if tiers[i] == d) / 2} for d in ("easy", "hard")}
    overall = {"n": 4, "tau": sum(taus) / 4}
    return {"benchmark": "perrecbench", "overall": overall, "by_task": {"pairwise": overall},
            "by_task_difficulty": {"pairwise": tier_summary}, "per_query": per_query}  # fmt: skip


def test_by_difficulty_gives_each_tier_its_rows_and_intervals():
    base = by_difficulty(perrec_tiers_report([1.0, 1.0, -1.0, 1.0]))
    tuned = by_difficulty(perrec_tiers_report([1.0, 1.0, 1.0, 1.0]))
    rows = comparison_rows({"base": base, "tuned": tuned}, baseline="base", samples=200)
    by_key = {(r["task"], r["checkpoint"]): r for r in rows}
    # easy: 1, 1 both: difference 0 exactly; hard: base (-1 + 1) / 2 = 0, tuned 1: +1, resamples 0 or +1 or +2
    assert by_key[("pairwise/easy", "tuned")]["diff"]["tau"].delta == 0.0
    assert (
        by_key[("pairwise/easy", "tuned")]["diff"]["tau"].low,
        by_key[("pairwise/easy", "tuned")]["diff"]["tau"].high,
    ) == (0.0, 0.0)
    hard = by_key[("pairwise/hard", "tuned")]["diff"]["tau"]
    assert hard.delta == pytest.approx(1.0) and hard.low == pytest.approx(0.0) and hard.high == pytest.approx(2.0)
    assert by_key[("pairwise/hard", "base")]["tau"] == pytest.approx(0.0)
    # overall: 0.5 vs 1.0
    assert by_key[("overall", "tuned")]["diff"]["tau"].delta == pytest.approx(0.5)
    assert "pairwise" not in {r["task"] for r in rows}


def test_by_difficulty_refuses_a_report_without_tiers():
    with pytest.raises(DataError, match="no difficulty tiers"):
        by_difficulty(recbench_report([0.1, 0.2]))


def test_reports_on_different_queries_are_refused():
    with pytest.raises(DataError, match="score different queries"):
        paired_differences(recbench_report([1, 0]), recbench_report([1, 0, 0]), ["explicit"])


def test_compare_shows_differences_and_marks_settled_ones():
    # ten queries each 0.1 above the base's: every resample's difference is exactly 0.1
    base = [i / 20 for i in range(10)]
    reports = {"base": recbench_report(base), "sft": recbench_report([r + 0.1 for r in base])}
    rows = comparison_rows(reports, baseline="base")
    table = markdown(rows, metric_specs(reports))
    assert "0.325 (+0.100 [+0.100, +0.100])*" in table  # sft's overall recall, 0.1 above the base's 0.225
    assert "| overall | base | 10 | 0.225 |" in table  # the baseline's own row has no difference
    with pytest.raises(DataError, match="no report of that name"):
        comparison_rows(reports, baseline="nope")


def test_reports_over_other_queries_are_said_to_be_so():
    """Side by side without a baseline, a --limit 2 run's means stood beside a full run's, without a word."""
    from rectune.evaluation.compare import other_queries_note

    full, limited = recbench_report([1, 0, 0]), recbench_report([1, 0])
    assert other_queries_note({"full": full, "sft": full}) == ""
    assert other_queries_note({"full": full, "sft": full, "quick": limited}) == (
        "Other queries than full's 3 are scored by quick (2): means over other queries do not compare (evaluate "
        "each checkpoint with the same --limit or --sample)."
    )


def test_an_interval_over_too_few_queries_says_so_and_carries_no_star():
    # one query: every resample is the one difference, +0.4, so [+0.4, +0.4] "excludes 0" yet settles nothing
    reports = {"base": recbench_report([0.0]), "sft": recbench_report([0.4])}
    rows = comparison_rows(reports, baseline="base")
    diff = next(r for r in rows if r["checkpoint"] == "sft" and r["task"] == "overall")["diff"]["recall"]
    assert diff.excludes_zero and diff.n == 1 and not diff.settled
    assert "0.400 (+0.400 [+0.400, +0.400], n 1 < 10) |" in markdown(rows, metric_specs(reports))


def test_compare_files_carry_the_intervals(tmp_path):
    import csv

    from rectune.evaluation.compare import write_outputs

    reports = {"base": recbench_report([0.1, 0.2, 0.3]), "sft": recbench_report([0.2, 0.3, 0.4])}
    rows = comparison_rows(reports, baseline="base")
    write_outputs(rows, metric_specs(reports), [tmp_path / f"comparison{s}" for s in (".md", ".csv", ".png")])
    table = list(csv.DictReader((tmp_path / "comparison.csv").open()))
    sft_overall = next(r for r in table if r["checkpoint"] == "sft" and r["task"] == "overall")
    assert float(sft_overall["recall_delta"]) == pytest.approx(0.1)
    assert float(sft_overall["recall_low"]) == pytest.approx(0.1)
    assert (tmp_path / "comparison.png").stat().st_size > 0


def test_changed_answers_count_queries_answered_differently(tmp_path):
    import json

    from rectune.evaluation.compare import changed_answers

    answers = {
        "base": {"q0": "Heat", "q1": "Alien", "q2": "Jaws"},
        "rft": {"q0": "Heat", "q1": "Alien [SEP] Jaws", "q2": "Jaws"},
        "sft": {"q0": "Ronin", "q1": "Casino", "q3": "an id base never saw"},
    }
    for name, by_id in answers.items():
        (tmp_path / name).mkdir()
        rows = "".join(json.dumps({"id": i, "completion": text}) + "\n" for i, text in by_id.items())
        (tmp_path / name / "predictions.jsonl").write_text(rows)
    (tmp_path / "scored_only").mkdir()  # a report without predictions (evaluate/score.py) is left out
    folders = [tmp_path / name for name in ("base", "rft", "sft", "scored_only")]
    # rft: q1 differs of q0-q2; sft: q0 and q1 differ, q3 is not shared
    assert changed_answers(folders, "base") == ["rft: 1 of 3", "sft: 2 of 2"]
    assert changed_answers(folders, "scored_only") == []


def test_chart_axes_fit_the_values_within_the_scale():
    from rectune.benchmarks import MetricSpec
    from rectune.evaluation.compare import axis_limits

    assert axis_limits(MetricSpec("P"), [0.01, 0.04]) == (0.0, pytest.approx(0.046))  # not 0 to 1
    assert axis_limits(MetricSpec("P"), [0.2, 0.95]) == (0.0, 1.0)  # never past the scale's top
    assert axis_limits(MetricSpec("τ", "signed"), [-0.2, 0.1]) == (-1.0, pytest.approx(0.115))
    assert axis_limits(MetricSpec("RMSE", "error"), [1.2, 1.6]) == (0.0, pytest.approx(1.84))
    assert axis_limits(MetricSpec("P"), [0.0, 0.0]) == (0.0, 1.0)  # nothing above 0: the whole scale


def test_reports_scored_on_other_data_are_not_paired():
    base, other = recbench_report([0.1, 0.2, 0.3]), recbench_report([0.2, 0.3, 0.4])
    base["config"] = {"predictions_key": {"data_sha256": "a" * 64}}
    other["config"] = {"predictions_key": {"data_sha256": "b" * 64}}  # a closed-book build: same ids, other prompts
    with pytest.raises(DataError, match="sft: was scored on other data than base .data_sha256 bbbbbbbbbbbb vs aaaa"):
        comparison_rows({"base": base, "sft": other}, baseline="base")
    other["config"]["predictions_key"]["data_sha256"] = "a" * 64
    assert comparison_rows({"base": base, "sft": other}, baseline="base")


def test_undefined_metrics_show_as_missing_and_the_chart_is_drawn(tmp_path):
    from rectune.evaluation.compare import write_outputs

    reports = {"base": recbench_report([0.1, 0.2, 0.3]), "sft": recbench_report([0.2, 0.3, 0.4])}
    reports["sft"]["overall"]["precision"] = float("nan")
    reports["sft"]["by_task"] = {"explicit": {**reports["sft"]["overall"], "recall": float("inf")}}
    rows = comparison_rows(reports)
    paths = [tmp_path / f"comparison{s}" for s in (".md", ".csv", ".png")]
    write_outputs(rows, metric_specs(reports), paths)
    assert "| explicit | sft | 3 | - | - |" in paths[0].read_text()
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_chart_never_writes_through_a_planted_link(tmp_path):
    from rectune.evaluation.compare import write_outputs

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    (tmp_path / "out").mkdir()
    for name in (".comparison.png.tmp.png", ".comparison.png.tmp"):  # the names a fixed temporary file had
        (tmp_path / "out" / name).symlink_to(victim)
    reports = {"base": recbench_report([0.1, 0.2, 0.3])}
    paths = [tmp_path / "out" / f"comparison{s}" for s in (".md", ".csv", ".png")]
    write_outputs(comparison_rows(reports), metric_specs(reports), paths)
    assert victim.read_text() == "the user's own file"
    assert paths[2].read_bytes()[:4] == b"\x89PNG" and not paths[2].is_symlink()


def test_a_metric_without_a_value_gets_no_panel_and_crowded_panels_no_labels(tmp_path, monkeypatch):
    from matplotlib import pyplot

    from rectune.evaluation.compare import MAX_LABELLED_BARS, charted_metrics, write_outputs

    # closed-book data: no query has a candidate recall, so the chart has no empty "Cand. R" panel
    reports = {"base": recbench_report([0.1] * 10), "sft": recbench_report([0.3] * 10)}
    rows = comparison_rows(reports, baseline="base")
    for row in rows:
        row["candidate_recall"] = None
    assert "candidate_recall" not in charted_metrics(rows) and "recall" in charted_metrics(rows)
    drawn = []
    original = pyplot.Figure.savefig
    monkeypatch.setattr(pyplot.Figure, "savefig", lambda fig, *a, **k: drawn.append(fig) or original(fig, *a, **k))
    write_outputs(rows, metric_specs(reports), [tmp_path / f"c{s}" for s in (".md", ".csv", ".png")])
    (figure,) = drawn
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert not any(title.startswith("Cand. R") for title in titles) and any(t.startswith("R ") for t in titles)
    # 2 tasks (explicit, overall) x 2 checkpoints = 4 bars: each labelled upright, no legend inside a panel
    panel = next(ax for ax in figure.axes if ax.get_title().startswith("R "))
    assert MAX_LABELLED_BARS >= 4 and [t.get_rotation() for t in panel.texts] == [90.0] * 4
    assert all(ax.get_legend() is None for ax in figure.axes) and len(figure.legends) == 1
    # 9 checkpoints x 2 tasks = 18 bars, above MAX_LABELLED_BARS: no value labels (the table has the values)
    crowded = {f"c{i}": recbench_report([0.1 * (i % 5)] * 10) for i in range(9)}
    drawn.clear()
    rows = comparison_rows(crowded, baseline="c0")
    write_outputs(rows, metric_specs(crowded), [tmp_path / f"d{s}" for s in (".md", ".csv", ".png")])
    assert all(not ax.texts for ax in drawn[0].axes)


def test_an_interval_beside_its_difference_draws_an_empty_whisker_on_that_side(tmp_path):
    """One resample of recall 1, 0, 0 against 0, 0, 0 (seed 0) draws the hit three times: the interval is
    [1, 1], above the observed difference 1/3, and its lower whisker (1/3 - 1) would be negative, which
    matplotlib refuses."""
    from rectune.evaluation.compare import _error_bars, write_outputs

    reports = {"base": recbench_report([0.0, 0.0, 0.0]), "sft": recbench_report([1.0, 0.0, 0.0])}
    rows = comparison_rows(reports, baseline="base", samples=1, seed=0)
    diff = next(r for r in rows if r["checkpoint"] == "sft" and r["task"] == "overall")["diff"]["recall"]
    assert diff.delta == pytest.approx(1 / 3) and (diff.low, diff.high) == (1.0, 1.0)
    by_key = {(r["task"], r["checkpoint"]): r for r in rows}
    assert _error_bars(by_key, ["overall"], "sft", "recall") == [[0.0], [pytest.approx(2 / 3)]]
    write_outputs(rows, metric_specs(reports), [tmp_path / f"comparison{s}" for s in (".md", ".csv", ".png")])
    assert (tmp_path / "comparison.png").stat().st_size > 0
