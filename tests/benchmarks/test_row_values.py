"""Ratings that are not finite numbers and titles holding line breaks stop at row load, in one line naming
file, line and field."""

import json
import re

import pytest

from rectune.benchmarks import load_rows
from rectune.core.io import DataError
from tests.conftest import ROOT

PERREC_ROW = json.loads((ROOT / "tests/fixtures/prepared_v2/perrec/train.jsonl").read_text().splitlines()[0])
LLMREC_ROW = {"id": "rating/u", "benchmark": "llmrec", "domain": "beauty", "task": "rating", "user": "u",
              "history": [{"id": "I1", "title": "Rose Face Cream", "rating": 4.0}],
              "item": {"id": "I0", "title": "Lip Balm"}, "target": "4.0"}  # fmt: skip


def written(tmp_path, row):
    path = tmp_path / "rows.jsonl"
    # json.dumps writes NaN and Infinity, as Python's own JSON writers do; json.loads reads them back as floats
    path.write_text(json.dumps(LLMREC_ROW | {"id": "rating/v"}) + "\n" + json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [({"target": "nan"}, "field 'target': a rating task needs a numeric target .a finite number., got 'nan'"),
     ({"target": "inf"}, "field 'target': a rating task needs a numeric target .a finite number., got 'inf'"),
     ({"history": [{"id": "I1", "title": "Rose Face Cream", "rating": "five"}]},
      "field 'history': entry 0: 'rating' must be a finite number, got 'five'")],
)  # fmt: skip
def test_llmrec_ratings_must_be_finite_numbers(tmp_path, change, message):
    path = written(tmp_path, LLMREC_ROW | change)
    with pytest.raises(DataError, match=rf"{path}:2: row 'rating/u', {message}"):
        load_rows(path)


@pytest.mark.parametrize(
    ("user", "message"),
    [({"mean_rating": "high"}, "user 0: 'mean_rating' must be a finite number, got 'high'"),
     ({"rating": float("nan")}, "user 0: 'rating' must be a finite number, got nan"),
     ({"history": [{"title": "Lip Balm", "rating": float("nan")}]},
      "user 0: history entry 0: 'rating' must be a finite number, got nan"),
     # the prompt shows each entry's title and rating: one missing was a KeyError there
     ({"history": [{"title": "Lip Balm", "rating": 4.0}, {}]}, "user 0: history entry 1: 'title' missing"),
     ({"history": [{"title": "Lip Balm"}]}, "user 0: history entry 0: 'rating' missing")],
)  # fmt: skip
def test_perrec_ratings_must_be_finite_numbers(tmp_path, user, message):
    row = {**PERREC_ROW, "users": [{**PERREC_ROW["users"][0], **user}]}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(PERREC_ROW) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=rf"{path}:2: row '1#0/pointwise/0', field 'users': {message}"):
        load_rows(path)


RECBENCH_ROW = {"id": "movie/explicit/0", "domain": "movie", "task": "explicit", "query": "A heist film?",
                "ground_truth": ["Heat (1995)"], "history": ["Ronin (1998)"],
                "candidates": [{"id": "1", "title": "Heat (1995)"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [({"ground_truth": ["Heat (1995)\n# injected"]}, "field 'ground_truth': entry 0 holds a control character"),
     ({"history": ["Ronin\u2028(1998)"]}, "field 'history': entry 0 holds a control character"),
     ({"candidates": [{"id": "1", "title": "Heat\x1b[31m"}]},
      "field 'candidates': entry 0 'title' holds a control character")],
)  # fmt: skip
def test_titles_in_rows_are_one_line(tmp_path, change, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(RECBENCH_ROW) + "\n" + json.dumps(RECBENCH_ROW | change) + "\n")
    with pytest.raises(DataError, match=rf"{path}:2: row 'movie/explicit/0', {message}"):
        load_rows(path)


def test_llmrec_titles_are_one_line(tmp_path):
    path = written(tmp_path, LLMREC_ROW | {"item": {"id": "I0", "title": "Lip\rBalm"}})
    with pytest.raises(DataError, match="field 'item': 'title' holds a control character"):
        load_rows(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [(RECBENCH_ROW | {"candidates": [{"id": [None], "title": "Heat (1995)"}]},
      "field 'candidates': entry 0: 'id' must be a non-empty string, got [None]"),
     (RECBENCH_ROW | {"candidates": [{"id": "1", "title": True}]},
      "field 'candidates': entry 0: 'title' must be a non-empty string, got True"),
     (RECBENCH_ROW | {"candidates": [{"id": "1", "title": "Heat (1995)", "rank": {}}]},
      "field 'candidates': candidate 0: 'rank' must be a finite number, got {}"),
     (RECBENCH_ROW | {"candidates": [{"id": "1", "title": "Heat (1995)", "facts": 3}]},
      "field 'candidates': candidate 0: 'facts' must be a string, got 3"),
     (LLMREC_ROW | {"item": {"id": [[1]], "title": "Lip Balm"}},
      "field 'item': 'id' must be a non-empty string, got [[1]]"),
     (LLMREC_ROW | {"history": [{"id": "I1", "title": {}, "rating": 4.0}]},
      "field 'history': entry 0: 'title' must be a non-empty string, got {}"),
     (PERREC_ROW | {"users": [{**PERREC_ROW["users"][0], "user": 2.5}]},
      "field 'users': user 0: 'user' must be a non-empty string, got 2.5"),
     (PERREC_ROW | {"users": [{**PERREC_ROW["users"][0], "profile": {}}]},
      "field 'users': user 0: 'profile' must be a string, got {}"),
     (PERREC_ROW | {"item": {**PERREC_ROW["item"], "categories": ["Beauty", ["a"]]}},
      "field 'item': 'categories' must be a list of strings, got ['Beauty', ['a']]"),
     (PERREC_ROW | {"item": {**PERREC_ROW["item"], "description": float("inf")}},
      "field 'item': 'description' must be a string, got inf")],
)  # fmt: skip
def test_ids_titles_and_texts_inside_entries_are_strings(tmp_path, row, message):
    """Each was loaded as it was and became a TypeError in scoring, the prompts or a baseline."""
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=rf"{path}:1: row '[^']+', {re.escape(message)}"):
        load_rows(path)
