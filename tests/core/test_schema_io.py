import json
import os

import pytest
from conftest import read_jsonl, run_script

import rectune.core.io as rectune_io
from rectune.benchmarks import load_rows
from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.core.cli import run
from rectune.core.io import (
    DataError,
    RecTuneError,
    atomic_write,
    numbered_jsonl,
    parse_json,
    write_json,
    write_jsonl,
)
from rectune.core.outputs import check_output_folder, output_set

GOOD = {
    "id": "movie/explicit/0",
    "benchmark": "recbench+",
    "domain": "movie",
    "task": "explicit",
    "query": "thrillers please",
    "ground_truth": ["Heat (1995)"],
    "ground_truth_ids": ["1"],
    "conditions": [["Genre", "Thriller"]],
    "condition_num": 1,
}


def write_rows(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_round_trip(tmp_path):
    path = write_rows(tmp_path / "t.jsonl", [GOOD])
    (row,) = load_rows(path)
    assert row.to_dict() == {**GOOD, "history": []}
    assert row.is_condition_based


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": ""}, "field 'id': must be a non-empty string"),
        ({"task": "ranking"}, "field 'task': must be one of"),
        ({"domain": 3}, "field 'domain': must be a non-empty string"),
        ({"ground_truth": []}, "field 'ground_truth': must not be empty"),
        ({"ground_truth": "Heat"}, "field 'ground_truth': must be a list of strings"),
        ({"conditions": [["Genre"]]}, "field 'conditions': must be a list of [relation, value] string pairs"),
        ({"condition_num": "two"}, "field 'condition_num': must be a non-negative integer"),
        ({"misinformation": ["x"]}, "field 'misinformation': must be a list of objects"),
        ({"colour": "red"}, "field 'colour': unknown field"),
    ],
)
def test_bad_fields_name_file_line_and_field(tmp_path, change, message):
    path = write_rows(tmp_path / "t.jsonl", [GOOD, {**GOOD, "id": "second", **change}])
    with pytest.raises(DataError) as err:
        load_rows(path)
    assert f"{path}:2:" in str(err.value)
    assert message in str(err.value)


def test_missing_field(tmp_path):
    bad = {k: v for k, v in GOOD.items() if k != "query"}
    with pytest.raises(DataError, match=r"t.jsonl:1: row 'movie/explicit/0', field 'query': missing"):
        load_rows(write_rows(tmp_path / "t.jsonl", [bad]))


def test_duplicate_ids(tmp_path):
    with pytest.raises(DataError, match=r":2: field 'id': duplicate id 'movie/explicit/0' \(first on line 1\)"):
        load_rows(write_rows(tmp_path / "t.jsonl", [GOOD, GOOD]))


def test_malformed_and_empty_jsonl(tmp_path):
    with pytest.raises(DataError, match=r"t.jsonl:2: malformed JSON"):
        read_jsonl(write_rows(tmp_path / "t.jsonl", [GOOD, "{not json"]))
    with pytest.raises(DataError, match=r"t.jsonl:1: expected a JSON object, got list"):
        read_jsonl(write_rows(tmp_path / "t.jsonl", ["[1, 2]"]))
    with pytest.raises(DataError, match="file is empty"):
        read_jsonl(write_rows(tmp_path / "t.jsonl", []))
    with pytest.raises(DataError, match="file not found"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_a_line_past_the_cap_stops_the_read_in_one_line(tmp_path, monkeypatch):
    """A file of no line break (gigabytes of another kind of file named .jsonl) was read whole into memory, and the
    allocator's refusal was blamed on the batch size."""
    monkeypatch.setattr(rectune_io, "MAX_LINE_BYTES", 100)
    path = tmp_path / "test.jsonl"
    path.write_bytes(b'{"a": "' + b"x" * 90 + b'"}\n' + b"y" * 101)  # 100 bytes with its newline, then 101
    with pytest.raises(DataError) as caught:
        numbered_jsonl(path)
    assert str(caught.value) == (
        f"{path}:2: a line longer than 100 bytes: no row, item or answer is near that (not a JSONL file?)"
    )
    path.write_bytes(b'{"a": "' + b"x" * 90 + b'"}\n' + b"{}")
    assert numbered_jsonl(path) == [(1, {"a": "x" * 90}), (2, {})]


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write("partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    write_jsonl(target, [{"a": 1}])
    with pytest.raises(TypeError):
        write_jsonl(target, [{"a": 2}, {"b": object()}])  # fails mid-way: old content survives
    assert read_jsonl(target) == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_from_dict_accepts_optional_fields():
    row = RecBenchRow.from_dict({**GOOD, "profile": {"group": "25-34"}, "source_user": "7", "history": ["Ronin"]})
    assert row.profile == {"group": "25-34"} and row.history == ["Ronin"]


def test_write_json_puts_one_item_per_line_where_asked(tmp_path):
    report = {"overall": {"n": 2, "recall": 0.5}, "per_query": [{"id": "a", "recall": 1.0}, {"id": "b", "recall": 0.0}]}
    write_json(tmp_path / "r.json", report, line_per_item=("per_query",))
    text = (tmp_path / "r.json").read_text()
    assert json.loads(text) == report
    assert '    {"id": "a", "recall": 1.0},\n    {"id": "b", "recall": 0.0}\n' in text
    assert '  "overall": {\n    "n": 2,' in text  # the rest stays indented


def test_rows_written_before_rows_named_their_benchmark_still_load(tmp_path):
    """Earlier versions wrote RecBench+ test rows and RFT examples without ``benchmark``: still valid."""
    from rectune.training.rewards import rft_rewards
    from rectune.training.views import check_examples

    legacy = {k: v for k, v in GOOD.items() if k != "benchmark"}
    (row,) = load_rows(write_rows(tmp_path / "t.jsonl", [legacy]))
    assert row.benchmark == "recbench+" and row.to_dict()["benchmark"] == "recbench+"
    (tmp_path / "catalog.jsonl").write_text(json.dumps({"id": "1", "title": "Heat (1995)"}) + "\n")
    (tmp_path / "kg.jsonl").write_text("")
    rft = {"prompt": [{"role": "user", "content": "q"}], "id": "q", "task": "explicit", "ground_truth": ["Heat"],
           "ground_truth_ids": ["1"], "conditions": []}  # fmt: skip
    write_rows(tmp_path / "train_rft.jsonl", [rft])
    check_examples(tmp_path / "train_rft.jsonl", "rft")
    funcs, names = rft_rewards([], tmp_path / "train_rft.jsonl")
    assert names == ["recall", "format", "hallucination", "misinformed"]
    assert funcs[0](["Heat"], ground_truth=[["Heat"]], ground_truth_ids=[["1"]], task=["explicit"],
                    conditions=[[]]) == [1.0]  # fmt: skip


def test_an_unknown_benchmark_is_named_with_the_known_ones(tmp_path):
    with pytest.raises(
        DataError, match=r"t.jsonl:1: field 'benchmark': must be one of recbench\+, perrecbench, llmrec"
    ):
        load_rows(write_rows(tmp_path / "t.jsonl", [{**GOOD, "benchmark": "recbench"}]))


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"id": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"t.jsonl:2: not UTF-8 text \(byte 12 of the line\)"):
        load_rows(path)


def test_half_a_utf16_pair_is_read_as_the_replacement_character(tmp_path, movie_data, train_data):
    """A review's emoji cut in two ("\\ud83d") is no character: every record written from it failed to encode."""
    pair, half = "\\ud83d\\ude00", "\\udcff"  # JSON's escapes: a whole emoji, then a lone half
    text = f'{{"a{half}": ["x{half}", {{"k": "{pair} ok {half}"}}], "n": 1}}'
    assert parse_json(text, "f") == {"a\ufffd": ["x\ufffd", {"k": "\U0001f600 ok \ufffd"}], "n": 1}
    assert parse_json(text.encode(), "f")["a\ufffd"][0] == "x\ufffd" and parse_json('"\\\\udcff"', "f") == "\\udcff"
    rows = (movie_data / "test.jsonl").read_text().splitlines()
    data = tmp_path / "test.jsonl"  # a query holding one, evaluated: the report is written whole
    data.write_text("\n".join([rows[0].replace('in it.",', f'in it.{half}",'), *rows[1:]]) + "\n")
    for name in ("catalog.jsonl", "kg.jsonl", "stats.json"):
        (tmp_path / name).write_bytes((movie_data / name).read_bytes())
    (tmp_path / "train.jsonl").write_bytes((train_data / "train.jsonl").read_bytes())  # what popularity counts
    result = run_script("evaluate/run.py", "--model", "baseline:popularity", "--data", data, "--out", tmp_path / "r",
                        "--no-wandb")  # fmt: skip
    assert result.returncode == 0 and "in it.\ufffd" in (tmp_path / "r" / "details.jsonl").read_text()


def test_files_are_created_readable_by_others(tmp_path):
    write_jsonl(tmp_path / "rows.jsonl", [GOOD])
    # the mode follows the umask (0644 under the usual 022), not mkstemp's private 0600
    assert (tmp_path / "rows.jsonl").stat().st_mode & 0o777 == 0o666 & ~rectune_io.UMASK


def test_the_cli_prints_user_errors_as_one_line_and_exits_2(capsys):
    def fails():
        raise DataError("data/x.jsonl", "field 'id': must be a string\nsecond line", line=3)

    with pytest.raises(SystemExit) as stopped:
        run(fails)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: data/x.jsonl:3: field 'id': must be a string second line\n"


def test_the_cli_reports_a_full_disk_by_file(capsys):
    import errno

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device", "out/train_sft.jsonl")

    with pytest.raises(SystemExit) as stopped:
        run(disk_full)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: No space left on device: out/train_sft.jsonl\n"


def test_a_full_disk_a_copy_meets_names_the_file_it_writes_and_the_temporary_folder_says_so(capsys, tmp_path,
                                                                                             monkeypatch):  # fmt: skip
    """shutil's copy names its source first: W&B's media copied from the temporary folder into a full report folder
    was blamed on the temporary folder; a library's own error for a full disk (DuckDB's) was a traceback."""
    import errno
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))

    def copy_to_a_full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", f"{tmp_path}/tmp/t.json", None, "out/wandb/t.json")

    class IOException(Exception):  # DuckDB's, as its rating store raises it: no OSError
        pass

    def store_in_a_full_temporary_folder():
        raise IOException(f'IO Error: Could not write file "{tmp_path}/tmp/r/ratings.duckdb": No space left on device')

    for failing in (copy_to_a_full_disk, store_in_a_full_temporary_folder):
        with pytest.raises(SystemExit) as stopped:
            run(failing)
        assert stopped.value.code == 2
    hint = f"(in the temporary folder {tmp_path}/tmp: set TMPDIR to a folder on a disk with room)"
    assert capsys.readouterr().err.splitlines() == [
        "error: No space left on device: out/wandb/t.json",
        f'error: IO Error: Could not write file "{tmp_path}/tmp/r/ratings.duckdb": No space left on device {hint}',
    ]


def test_a_hugging_face_cache_that_cannot_be_written_names_the_variable_to_set(capsys, tmp_path, monkeypatch):
    """`HF_HOME` on a folder that cannot be made was "No such file or directory: /proc/1/hf", naming no variable."""
    import errno

    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

    def cache_view():
        raise OSError(errno.EACCES, "Permission denied", str(tmp_path / "hf" / "datasets" / "rectune-views"))

    def elsewhere():
        raise OSError(errno.EACCES, "Permission denied", str(tmp_path / "hf-notes"))

    for failing in (cache_view, elsewhere):
        with pytest.raises(SystemExit):
            run(failing)
    assert capsys.readouterr().err.splitlines() == [
        f"error: Permission denied: {tmp_path}/hf/datasets/rectune-views (the Hugging Face cache, HF_HOME="
        f"{tmp_path}/hf: set it to a folder you can write)",
        f"error: Permission denied: {tmp_path}/hf-notes",
    ]
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))

    def default_cache():  # no variable set: the default cache under the home folder
        raise OSError(errno.EROFS, "Read-only file system", f"{tmp_path}/.cache/huggingface")

    with pytest.raises(SystemExit):
        run(default_cache)
    hint = f"(the Hugging Face cache, {tmp_path}/.cache/huggingface: set HF_HOME to a folder you can write)"
    assert capsys.readouterr().err.strip().endswith(hint)


def test_a_bug_still_shows_its_traceback():
    def bug():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run(bug)


def test_output_sets_replace_their_own_folders_only(tmp_path):
    target = tmp_path / "data"
    target.mkdir()
    (target / "test.jsonl").write_text("{}\n")  # no marker: whatever it is called, it is not ours
    with pytest.raises(RecTuneError, match=r"holds files RecTune did not write there \(test.jsonl; no .rectune.json"):
        check_output_folder(target, "some data", overwrite=False)
    assert (target / "test.jsonl").read_text() == "{}\n"
    with output_set(target, "some data", overwrite=True) as staging:
        (staging / "train.jsonl").write_text("{}\n")
    assert sorted(p.name for p in target.iterdir()) == [".rectune.json", "train.jsonl"]
    with pytest.raises(RecTuneError, match="holds a RecTune some data output, not a other data one"):
        check_output_folder(target, "other data", overwrite=False)
    with pytest.raises(RecTuneError, match="boom"), output_set(target, "some data") as staging:
        (staging / "half.jsonl").write_text("{")
        raise RecTuneError("boom")
    assert sorted(p.name for p in target.iterdir()) == [".rectune.json", "train.jsonl"]  # untouched
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # the failed staging folder is gone


def test_an_output_vouched_for_by_size_and_time_refuses_a_touched_file_unhashed(tmp_path):
    target = tmp_path / "shape"
    with output_set(target, "model shape", digest=False) as staging:
        (staging / "model.safetensors").write_bytes(b"random weights")
    recorded = json.loads((target / ".rectune.json").read_text())["files"]["model.safetensors"]
    assert set(recorded) == {"size", "mtime_ns"}  # no SHA-256: 6 GB would take seconds to hash
    check_output_folder(target, "model shape", overwrite=False)  # untouched: its own, replaceable
    weights = target / "model.safetensors"
    os.utime(weights, ns=(recorded["mtime_ns"] + 10**9, recorded["mtime_ns"] + 10**9))  # the same bytes, touched
    with pytest.raises(RecTuneError, match="model.safetensors changed since RecTune wrote it"):
        check_output_folder(target, "model shape", overwrite=False)


NESTED = "[" * 100_000 + "]" * 100_000  # deeper than Python's parser recurses


def test_hostile_json_is_malformed_input_not_a_crash(tmp_path):
    from rectune.data.ratings import MAX_LITERAL_CHARS, read_items
    from rectune.evaluation.answer_files import load_answers

    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(json.dumps(GOOD) + "\n" + NESTED + "\n")
    with pytest.raises(DataError, match="rows.jsonl:2: malformed JSON: nested too deeply"):
        numbered_jsonl(jsonl)
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"id": "a", "completion": "Heat"}\n' + "{" + '"id": ' + "1" * 5000 + "}\n")
    with pytest.raises(DataError, match="answers.jsonl:2: malformed JSON: Exceeds the limit"):
        load_answers(answers)
    # Amazon 2014 metadata: Python literals, read within bounds (MemoryError and RecursionError from the
    # parser, a 5,000-digit number, nesting, an outsized line)
    meta = tmp_path / "meta_2014.json"
    good = "{'asin': 'X', 'title': 'Rose Face Cream'}"
    huge = "{'a': '" + "x" * MAX_LITERAL_CHARS + "'}"
    hostile = ["{'a': " + "-" * 10_000 + "1}", "{'a': " + "1+" * 100_000 + "1}", "{'a': " + "9" * 5000 + "}"]
    for bad in (*hostile, "{'a': " + NESTED + "}", huge):
        meta.write_text(good + "\n" + bad + "\n")
        with pytest.raises(DataError, match="meta_2014.json:2: malformed JSON"):
            read_items(meta)


def test_lists_nested_within_the_parsers_limit_are_read_without_recursing(tmp_path):
    from rectune.data.ratings import read_items, read_reviews

    deep = "[" * 700 + '"x"' + "]" * 700  # json reads it; a call a level, two frames each, went past the limit
    review = '{"reviewerID": "u", "asin": "i", "overall": 5, "unixReviewTime": 1400000000, "reviewText": "Nice"'
    reviews = tmp_path / "reviews.json"
    reviews.write_text(review + ', "summary": ' + deep + "}\n" + review + ', "summary": ["a", ["", ["b"]], "c"]}\n')
    assert [(r.title, r.text) for r in read_reviews(reviews)] == [("x", "Nice"), ("a b c", "Nice")]
    meta = tmp_path / "meta.json"
    categories = '[["Beauty", ["Skin", ' + deep + ']], {"a": 1}, true, 5]'
    meta.write_text('{"asin": "i", "title": "Cream", "categories": ' + categories + ', "description": ' + deep + "}\n")
    item = read_items(meta)["i"]  # categories are names: a list nested in a path, a mapping, true are none
    assert item.attributes == {"categories": ["Beauty", "5"], "description": "x"}


def test_a_nested_prediction_line_is_damaged_and_asked_again(tmp_path):
    from rectune.evaluation.predictions import read_finished

    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"id": "a", "completion": "Heat"}\n' + NESTED + "\n" + '{"id": "b", "completion": "x"}\n')
    assert read_finished(predictions, {"a", "b", "c"}) == {"a": "Heat", "b": "x"}
    assert predictions.read_text() == '{"id": "a", "completion": "Heat"}\n{"id": "b", "completion": "x"}\n'


def test_a_jsonl_file_starting_with_a_byte_order_mark_reads_as_without(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "1"}\n{"id": "\xef\xbb\xbf2"}\n')
    assert numbered_jsonl(path) == [(1, {"id": "1"}), (2, {"id": "\ufeff2"})]  # only the file's first mark
