import json

import pytest
from conftest import run_script

PREDICTIONS = {
    "movie/explicit/0": "1. Heat (1995)\n2. Casino (1995)\n3. Made Up Movie",
    "movie/explicit/1": "Taxi Driver\nGoodfellas\nCasino",
    "movie/explicit/2": "",
    "movie/implicit/0": "The Usual Suspects",
    "movie/implicit/1": "The Godfather",
    "movie/misinformed/0": "I'm sorry, but Steven Spielberg did not direct Das Boot.",
    "movie/interest/0-0": "Toy Story",
    "movie/interest/0-1": "Unknown Film\nToy Story (1995)",
    "movie/demographics/0-0": "Heat, GoodFellas, Casino, Ronin",
}


def write_predictions(path, predictions):
    path.write_text("".join(json.dumps({"id": k, "completion": v}) + "\n" for k, v in predictions.items()))
    return path


def test_score_cli_end_to_end(movie_data, tmp_path):
    preds = write_predictions(tmp_path / "p.jsonl", PREDICTIONS)
    out = tmp_path / "report.json"
    result = run_script("evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", preds, "--out", out)
    report = json.loads(out.read_text())
    assert "| explicit | 3 |" in result.stdout
    for entry in [report["overall"], *report["by_task"].values()]:
        assert {"precision", "recall", "cmr", "ftr", "n"} <= set(entry)
    explicit = report["by_task"]["explicit"]
    # q0: P 1/3 R 1/2; q1: P 1 R 1; q2: empty -> 0, 0, FTR 1
    assert explicit["precision"] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert explicit["recall"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    # q0: Heat meets De Niro + Thriller (Casino has no De Niro fact) -> 1/3; q1: all three are Scorsese -> 1
    assert explicit["cmr"] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert explicit["ftr"] == pytest.approx(1 / 3)
    assert report["by_task"]["misinformed"]["ftr"] == 1.0  # the refusal counts as fail-to-recommend
    assert report["by_task"]["implicit"]["recall"] == pytest.approx((1 + 1 / 2) / 2)
    # demographics: GT Heat + GoodFellas; 4 recommended, 2 hits
    assert report["by_task"]["demographics"]["precision"] == pytest.approx(0.5)
    assert report["by_task"]["demographics"]["cmr"] is None
    assert report["overall"]["n"] == 9
    assert len(report["per_query"]) == 9


def test_missing_and_unknown_predictions(movie_data, tmp_path):
    partial = dict(list(PREDICTIONS.items())[:4])
    preds = write_predictions(tmp_path / "p.jsonl", partial)
    out = tmp_path / "report.json"
    result = run_script(
        "evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", preds, "--out", out, check=False
    )
    assert result.returncode != 0
    assert "5 test ids have no prediction: movie/implicit/1" in result.stderr
    assert "evaluate/score.py --allow-subset scores the ids that have one" in result.stderr
    assert not out.exists()
    run_script(
        "evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", preds, "--out", out, "--allow-subset"
    )
    assert json.loads(out.read_text())["overall"]["n"] == 4

    unknown = write_predictions(tmp_path / "u.jsonl", {**PREDICTIONS, "movie/explicit/99": "Heat"})
    result = run_script(
        "evaluate/score.py",
        "--data",
        movie_data / "test.jsonl",
        "--predictions",
        unknown,
        "--out",
        tmp_path / "r2.json",
        check=False,
    )
    assert "1 predictions for ids not in the data: movie/explicit/99" in result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "movie/explicit/0"}\n', "p.jsonl:1: answer 'movie/explicit/0': needs 'completion', 'response'"),
        ('{"id": "movie/explicit/0", "completion": 3}\n', "needs 'completion', 'response'"),
        ('{"id": [3], "completion": "x"}\n', "field 'id' (or 'custom_id'): must be a string or an integer"),
        ('{"id": 99, "response": "x"}\n', "1 predictions for ids not in the data: 99"),
        ("not json\n", "p.jsonl:1: malformed JSON"),
        ('[{"id": "a", "response": "x"}', "p.jsonl:1: malformed JSON"),
        ("", "file holds no answers"),
    ],
)
def test_bad_predictions(movie_data, tmp_path, content, message):
    preds = tmp_path / "p.jsonl"
    preds.write_text(content)
    result = run_script(
        "evaluate/score.py",
        "--data",
        movie_data / "test.jsonl",
        "--predictions",
        preds,
        "--out",
        tmp_path / "r.json",
        check=False,
    )
    assert result.returncode != 0 and message in result.stderr
    assert not (tmp_path / "r.json").exists()


def test_catalog_must_exist(tmp_path):
    data = tmp_path / "test.jsonl"
    data.write_text(
        json.dumps(
            {
                "id": "a",
                "benchmark": "recbench+",
                "domain": "movie",
                "task": "interest",
                "query": "q",
                "ground_truth": ["Heat"],
            }
        )
        + "\n"
    )
    preds = write_predictions(tmp_path / "p.jsonl", {"a": "Heat"})
    result = run_script(
        "evaluate/score.py", "--data", data, "--predictions", preds, "--out", tmp_path / "r.json", check=False
    )
    assert "catalog.jsonl: file not found" in result.stderr


def test_answers_holding_unicode_line_separators_are_read_whole(movie_data, tmp_path):
    # written as RecTune writes answers (ensure_ascii=False): U+2028, U+2029 and U+0085 stay raw inside the strings
    answers = {**PREDICTIONS, "movie/explicit/1": "Taxi Driver\u2028Goodfellas\u2029Casino\u0085"}
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": k, "completion": v}, ensure_ascii=False) + "\n"
                             for k, v in answers.items()), encoding="utf-8")  # fmt: skip
    assert "\u2028" in preds.read_text(encoding="utf-8")
    out = tmp_path / "report.json"
    run_script("evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", preds, "--out", out)
    assert json.loads(out.read_text())["overall"]["n"] == 9
