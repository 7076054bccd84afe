"""What scoring reads beside the data (catalog, KG) is read before any answer is generated or any request
written, and the data file before any model loads: a missing catalog was found only once every answer was in
(hours on a real benchmark), leaving the report folder holding them, and a missing data file once the model had
loaded."""

import shutil

from conftest import run_script
from test_hostile import one_line

LOCAL = ("--limit", "2", "--max-new-tokens", "4", "--no-wandb")


def data_without(tmp_path, movie_data, name):
    """The movie test set in a folder of its own, ``name`` missing beside it."""
    folder = tmp_path / f"no-{name}"
    shutil.copytree(movie_data, folder)
    (folder / name).unlink()
    return folder / "test.jsonl"


def test_a_missing_catalog_or_kg_stops_an_evaluation_before_it_generates(tmp_path, movie_data, tiny_model):
    for name in ("catalog.jsonl", "kg.jsonl"):
        data = data_without(tmp_path, movie_data, name)
        out = tmp_path / f"report-{name}"
        result = run_script("evaluate/run.py", "--model", tiny_model, "--data", data, "--out", out, *LOCAL, check=False)
        one_line(result, f"{data.parent / name}: file not found (needed beside {data}; pass it explicitly")
        assert "query/s" not in result.stderr and not out.exists()  # no answer generated, no folder left


def test_a_malformed_catalog_line_stops_an_evaluation_before_it_generates(tmp_path, movie_data, tiny_model):
    data = data_without(tmp_path, movie_data, "catalog.jsonl")
    catalog = data.parent / "catalog.jsonl"
    lines = (movie_data / "catalog.jsonl").read_text().splitlines()
    catalog.write_text("\n".join([*lines[:2], '{"id": "x"', *lines[2:]]) + "\n")  # line 3 cut short
    out = tmp_path / "report"
    result = run_script("evaluate/run.py", "--model", tiny_model, "--data", data, "--out", out, *LOCAL, check=False)
    one_line(result, f"{catalog}:3: ")
    assert "query/s" not in result.stderr and not out.exists()


def test_batch_requests_are_not_written_for_data_whose_answers_cannot_be_scored(tmp_path, movie_data):
    data = data_without(tmp_path, movie_data, "kg.jsonl")
    out = tmp_path / "batch"
    result = run_script("evaluate/run.py", "--backend", "openai-batch", "--api-model", "gpt-4o", "--data", data,
                        "--out", out, "--no-wandb", check=False)  # fmt: skip
    one_line(result, f"{data.parent / 'kg.jsonl'}: file not found")
    assert not out.exists()
    kg = tmp_path / "elsewhere.jsonl"  # the flag that says where it is
    shutil.copy(movie_data / "kg.jsonl", kg)
    run_script("evaluate/run.py", "--backend", "openai-batch", "--api-model", "gpt-4o", "--data", data, "--kg", kg,
               "--out", out, "--no-wandb")  # fmt: skip
    assert (out / "batch_requests.jsonl").is_file()


def test_a_missing_data_file_is_one_line_before_the_model_loads(tmp_path, tiny_model):
    missing = tmp_path / "test.jsonl"
    result = run_script("evaluate/run.py", "--model", tiny_model, "--data", missing, "--out", tmp_path / "report",
                        *LOCAL, check=False)  # fmt: skip
    one_line(result, f"{missing}: file not found")
    assert "Loading weights" not in result.stderr and not (tmp_path / "report").exists()
