"""Failed requests in a batch output are counted like the live backend's: the run stops with "N of M
answers failed: REASON" unless they are to be scored as empty answers, and report.json counts them."""

import json

import pytest
from conftest import run_script
from test_hostile import one_line

from rectune.core.io import DataError
from rectune.evaluation.answer_files import load_answers

REFUSED = {"status_code": 400, "body": {"error": {"message": "Invalid  model\nname", "type": "invalid_request"}}}


def batch_output(path, ids, refused=(), cut=()):
    """An OpenAI batch output: 200s answering "Heat" (ended by the token limit for ``cut``), 400s for
    ``refused``."""
    with path.open("w") as handle:
        for row_id in ids:
            choice = {"message": {"role": "assistant", "content": "Heat"}, "finish_reason": "stop"}
            if row_id in cut:
                choice["finish_reason"] = "length"
            ok = {"status_code": 200, "body": {"choices": [choice]}}
            handle.write(json.dumps({"custom_id": row_id, "response": REFUSED if row_id in refused else ok}) + "\n")
    return path


def batch_requests(out, movie_data):
    """The command that writes the test set's batch requests to ``out`` (and scores their output), run once,
    and the requests' ids."""
    base = ("evaluate/run.py", "--backend", "openai-batch", "--model", "gpt-4o", "--data", movie_data / "test.jsonl",
            "--out", out, "--no-wandb")  # fmt: skip
    run_script(*base)
    return base, [json.loads(line)["custom_id"] for line in (out / "batch_requests.jsonl").read_text().splitlines()]


def test_http_errors_in_a_batch_output_stop_the_run_unless_scored_as_empty(tmp_path, movie_data):
    out = tmp_path / "batch"
    base, ids = batch_requests(out, movie_data)
    output = batch_output(tmp_path / "output.jsonl", ids, refused=ids[:3])
    result = run_script(*base, "--batch-output", output, check=False)
    one_line(result, f"3 of {len(ids)} answers failed: HTTP 400 Invalid model name", "--score-failures-as-empty")
    assert not (out / "report.json").exists() and not (out / "predictions.jsonl").exists()

    run_script(*base, "--batch-output", output, "--score-failures-as-empty")
    report = json.loads((out / "report.json").read_text())
    assert report["failed_requests"] == 3 and report["overall"]["n"] == len(ids)

    # score.py reads the same file the same way
    scored = tmp_path / "scored.json"
    result = run_script("evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", output,
                        "--out", scored, check=False)  # fmt: skip
    one_line(result, f"3 of {len(ids)} answers failed: HTTP 400 Invalid model name")
    assert not scored.exists()
    run_script("evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", output, "--out", scored,
               "--score-failures-as-empty")  # fmt: skip
    assert json.loads(scored.read_text())["failed_requests"] == 3


def test_a_refused_batch_output_leaves_a_fresh_or_empty_report_folder_as_it_was(tmp_path, movie_data):
    # scored into another folder than the requests': a new one is removed again, an empty one of yours stays empty
    base, ids = batch_requests(tmp_path / "requests", movie_data)
    failing = batch_output(tmp_path / "failing.jsonl", ids, refused=ids[:1])
    missing = batch_output(tmp_path / "missing.jsonl", ids[1:])
    empty = tmp_path / "empty"
    empty.mkdir()
    for output, words in ((failing, "answers failed"), (missing, f"{ids[0]}")):
        for out in (tmp_path / "fresh", empty):
            command = [*base[:-3], "--out", out, "--no-wandb", "--batch-output", output]
            one_line(run_script(*command, check=False), words)
            assert not (tmp_path / "fresh").exists() and list(empty.iterdir()) == []  # config.json was left


def test_odd_batch_lines_are_one_line_or_a_counted_failure(tmp_path):
    path = tmp_path / "output.jsonl"
    lines = {
        "choices as an object": {"custom_id": "a", "response": {"status_code": 200, "body": {"choices": {"0": 1}}}},
        "content not text": {"custom_id": "a", "response": {"body": {"choices": [{"message": {"content": 5}}]}}},
    }
    for line in lines.values():
        path.write_text(json.dumps(line) + "\n")
        with pytest.raises(DataError, match=r"output.jsonl:1: answer 'a': "):
            load_answers(path)
    # an error beside a string response, a 200 with no choices, a batch-level error: failures with their reason
    path.write_text("\n".join(json.dumps(line) for line in [
        {"id": "a", "response": "Heat", "error": {"code": "server_error", "message": "boom"}},
        {"custom_id": "b", "response": {"status_code": 200, "body": {"choices": []}}},
        {"custom_id": "c", "response": None, "error": {"message": "expired"}},
        {"custom_id": "d", "response": {"status_code": 200, "body": {"choices": [{"message": {"content": "Ronin"}}]}}},
        {"custom_id": "e", "response": {"status_code": 200, "body": {"choices": [{"message": {"content": [
            {"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}, {"type": "text", "text": "Heat"},
        ]}}]}}},  # a reasoning model of Mistral's batch API: its answer in parts
    ]) + "\n")  # fmt: skip
    answers = load_answers(path)
    assert answers.texts == {"a": "", "b": "", "c": "", "d": "Ronin", "e": "Heat"}
    assert answers.failed == {"a": "error boom", "b": "no choices in the body {'choices': []}", "c": "error expired"}
    assert answers.finish_reasons == {}  # none of these lines records one


def test_a_batch_outputs_finish_reasons_count_the_answers_cut_at_the_token_limit(tmp_path, movie_data):
    out = tmp_path / "batch"
    base, ids = batch_requests(out, movie_data)
    output = batch_output(tmp_path / "output.jsonl", ids, cut=ids[1:3])
    result = run_script(*base, "--batch-output", output)
    warning = f'2 of {len(ids)} answers used their token limit ("length") and may be cut short'
    assert warning in result.stderr and warning in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["completions"]["cut_at_max_new_tokens"] == 2
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {line["id"]: line["finish_reason"] for line in lines} == {
        row_id: "length" if row_id in ids[1:3] else "stop" for row_id in ids
    }
    # score.py counts the same answers, from the batch output and from the predictions it became
    for answers in (output, out / "predictions.jsonl"):
        scored = tmp_path / "scored.json"
        run_script("evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", answers, "--out", scored)
        assert json.loads(scored.read_text())["completions"]["cut_at_max_new_tokens"] == 2
    # the authors' {"id", "response"} lines record no reason: nothing is counted, and nothing is claimed
    authors = tmp_path / "authors-prediction.jsonl"
    authors.write_text("".join(json.dumps({"id": row_id, "response": "Heat"}) + "\n" for row_id in ids))
    run_script("evaluate/score.py", "--data", movie_data / "test.jsonl", "--predictions", authors, "--out", scored)
    assert json.loads(scored.read_text())["completions"]["cut_at_max_new_tokens"] is None
