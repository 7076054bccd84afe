"""Counts on the command line (K, --sample, --limit) are checked, and every backend scores the queries chosen."""

import pytest
from conftest import read_jsonl, run_script


@pytest.mark.parametrize(
    ("script", "flag", "value"),
    [("evaluate/run.py", "--k", "-1"), ("evaluate/run.py", "--sample", "-100"), ("evaluate/run.py", "--sample", "0"),
     ("evaluate/run.py", "--limit", "-1"), ("evaluate/score.py", "--k", "0")],
)  # fmt: skip
def test_a_count_below_one_is_refused_naming_the_flag(tmp_path, script, flag, value):
    result = run_script(script, flag, value, "--out", tmp_path / "out", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument {flag}: expected a number of at least 1, got {value}" in result.stderr.splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_the_batch_backend_writes_the_requests_of_the_queries_chosen(tmp_path, movie_data):
    out = tmp_path / "batch"
    run_script("evaluate/run.py", "--backend", "openai-batch", "--api-model", "gpt-4o", "--data",
               movie_data / "test.jsonl", "--out", out, "--sample", "2", "--task", "explicit")  # fmt: skip
    requests = read_jsonl(out / "batch_requests.jsonl")
    assert len(requests) == 2 and all(r["custom_id"].startswith("movie/explicit/") for r in requests)
