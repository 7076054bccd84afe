import json
import shutil

import pytest
from conftest import RELEASE, read_view, run_script

from rectune.benchmarks import load_rows
from rectune.benchmarks.recbench.release import read_release, split_rows
from rectune.core.io import DataError
from rectune.data.catalog import load_catalog, load_kg


def test_movie_release_converts_every_task(movie_data):
    rows = {r.id: r for r in load_rows(movie_data / "test.jsonl")}
    assert sorted({r.task for r in rows.values()}) == [
        "demographics",
        "explicit",
        "implicit",
        "interest",
        "misinformed",
    ]
    assert len(rows) == 9  # 3 explicit + 2 implicit + 1 misinformed + 2 interest queries + 1 demographics
    heat = rows["movie/explicit/0"]
    assert heat.ground_truth_ids == ["1", "2"]
    assert heat.conditions == [["Starring", "Robert De Niro"], ["Genre", "Thriller"]]
    # H'_u = H_u minus the ground truth, in time order
    assert heat.history == [
        "Taxi Driver (1976)",
        "Usual Suspects, The (1995)",
        "GoodFellas (1990)",
        "Casino (1995)",
        "Raging Bull (1980)",
    ]
    assert rows["movie/implicit/0"].ground_truth_ids == ["3"]  # "The Usual Suspects (1995)" resolved
    assert rows["movie/implicit/0"].multihop[0]["value"] == "Bryan Singer"
    assert rows["movie/misinformed/0"].misinformation[0] == {
        "item": "Das Boot (1981)",
        "relation": "Director",
        "claimed": "Steven Spielberg",
        "true": "Wolfgang Petersen",
    }
    assert rows["movie/interest/0-1"].ground_truth_ids == ["9"]
    assert rows["movie/demographics/0-0"].profile["group"] == "25-34"


def test_catalog_kg_and_stats(movie_data):
    catalog = {item.id: item for item in load_catalog(movie_data / "catalog.jsonl")}
    assert catalog["9"].title.startswith("City of Lost Children, The (Cité")  # Latin-1 .dat decoded
    assert catalog["1"].attributes == {"genres": ["Action", "Crime", "Thriller"]}
    kg = load_kg(movie_data / "kg.jsonl")
    assert kg.satisfies("1", [["Starring", "Robert De Niro"], ["Genre", "Thriller"]])  # record + movies.dat
    assert kg.satisfies("4", [["Director", "Wolfgang Petersen"]])  # true person of a misinformed claim
    assert not kg.satisfies("4", [["Director", "Steven Spielberg"]])
    assert kg.satisfies("5", [["Director", "Francis Ford Coppola"]])  # multihop hint
    stats = json.loads((movie_data / "stats.json").read_text())
    assert stats["unresolved_ground_truth"] == {"count": 1, "titles": {"Unknown Film (1999)": 1}}
    assert stats["by_task"]["explicit"]["by_conditions"] == {
        "1": {"train": 0, "test": 1},
        "2": {"train": 0, "test": 1},
        "3-4": {"train": 0, "test": 1},
    }


def test_training_files(tmp_path):
    run_script(
        "data_prep/recbench.py",
        "--src",
        RELEASE,
        "--domain",
        "movie",
        "--out",
        tmp_path,
        "--test-size",
        "0.5",
        "--with-history",
    )
    sft = read_view(tmp_path / "train_sft.jsonl")
    rft = read_view(tmp_path / "train_rft.jsonl")
    test_ids = {r.id for r in load_rows(tmp_path / "test.jsonl")}
    assert len(sft) == len(rft) == 9 - len(test_ids)
    assert {r["id"] for r in rft}.isdisjoint(test_ids)
    assert [m["role"] for m in sft[0]["messages"]] == ["system", "user", "assistant"]


def test_prompts_with_history_and_targets(tmp_path):
    run_script(
        "data_prep/recbench.py",
        "--src",
        RELEASE,
        "--domain",
        "movie",
        "--out",
        tmp_path,
        "--test-size",
        "0.0",
        "--with-history",
        "--k",
        "5",
    )
    rft = {r["id"]: r for r in read_view(tmp_path / "train_rft.jsonl")}
    example = rft["movie/explicit/0"]
    assert example["prompt"][0]["content"].startswith(
        "You are a movie recommender system. You are given a user's watched movies and a query"
    )
    assert example["prompt"][0]["content"] == (
        "You are a movie recommender system. You are given a user's watched movies and a query from the user. "
        "You need to recommend movies that satisfy the user's query and user preferences. Please output  5 "
        "recommended movies directly, do not output other content."
    )  # the authors' fixed-K prompt with history has the two spaces
    assert example["prompt"][1]["content"] == (
        "The user has watched the following movies:['Taxi Driver (1976)', 'Usual Suspects, The (1995)', "
        "'GoodFellas (1990)', 'Casino (1995)', 'Raging Bull (1980)']\nQuery: I'm in the mood for a tense "
        "thriller with Robert De Niro in it.\nRecommended movies (separated by [SEP]):"
    )
    assert example["ground_truth_ids"] == ["1", "2"]
    assert example["conditions"] == [["Starring", "Robert De Niro"], ["Genre", "Thriller"]]
    sft = read_view(tmp_path / "train_sft.jsonl")
    answers = {m["content"] for r in sft for m in r["messages"] if m["role"] == "assistant"}
    assert "The Godfather (1972) [SEP] The Godfather: Part II (1974)" in answers  # natural spelling, [SEP]


def test_book_domain_builds_catalog_from_titles(tmp_path):
    # "books", as perrecbench.py and llmrec.py spell a domain; the release's folder (and the rows) say "book"
    result = run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "books", "--out", tmp_path, "--test-size", "1.0"
    )
    assert "UserBasedQuery.json" in result.stderr  # missing file named in a warning
    titles = {item.title for item in load_catalog(tmp_path / "catalog.jsonl")}
    assert {"Dune", "Children of Dune", "The Hobbit", "Pride and Prejudice", "The Fellowship of the Ring"} <= titles
    rows = {r.id: r for r in load_rows(tmp_path / "test.jsonl")}
    assert len(rows) == 5 and {r.domain for r in rows.values()} == {"book"}
    dune = rows["book/explicit/0"]
    assert len(dune.ground_truth_ids) == 2
    assert dune.history == ["The Fellowship of the Ring", "The Hobbit"]  # ratings by title, minus ground truth
    kg = load_kg(tmp_path / "kg.jsonl")
    assert kg.satisfies(dune.ground_truth_ids[0], [["Author", "Frank Herbert"]])


def test_split_is_deterministic_and_by_text():
    rows = read_release(RELEASE, "movie").rows
    duplicate = rows[0].__class__(**{**rows[0].__dict__, "id": "copy"})
    rows.append(duplicate)  # same query text twice must land in one split
    train_a, test_a = split_rows(rows, 0.5, seed=1)
    train_b, test_b = split_rows(rows, 0.5, seed=1)
    assert [r.id for r in test_a] == [r.id for r in test_b]
    assert {r.query for r in train_a}.isdisjoint({r.query for r in test_a})
    assert len(train_a) + len(test_a) == len(rows)
    assert split_rows(rows, 0.0, 1)[1] == [] and split_rows(rows, 1.0, 1)[0] == []
    with pytest.raises(ValueError, match="test size"):
        split_rows(rows, 1.5, 1)


def test_utf8_dat_files(tmp_path):
    root = tmp_path / "release"
    shutil.copytree(RELEASE, root)
    dat = root / "data" / "movie" / "movies.dat"
    dat.write_bytes(dat.read_bytes().decode("latin-1").encode("utf-8"))
    release = read_release(root, "movie")
    assert any("Cité" in item.title for item in release.catalog)


def test_a_release_saved_with_byte_order_marks_converts_as_the_plain_one(tmp_path):
    """Windows tools start UTF-8 files with U+FEFF: kept, it made the first film's id "\\ufeff1" (no rating
    named it) and the query JSON malformed."""
    root = tmp_path / "release"
    shutil.copytree(RELEASE, root)
    for path in (root / "data" / "movie").iterdir():
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    for name, src in (("marked", root), ("plain", RELEASE)):
        run_script("data_prep/recbench.py", "--src", src, "--domain", "movie", "--out", tmp_path / name)
    for name in ("train.jsonl", "test.jsonl", "catalog.jsonl", "kg.jsonl"):
        assert (tmp_path / "marked" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name


def _broken_release(tmp_path, name, content):
    root = tmp_path / "release"
    shutil.copytree(RELEASE, root)
    (root / "data" / "movie" / name).write_text(content)
    return root


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("ExplicitQuery.json", '[{"movieSubset": ["Heat"]', "ExplicitQuery.json:1: malformed JSON"),
        ("ExplicitQuery.json", '{"not": "a list"}', "expected a JSON list of records"),
        ("ExplicitQuery.json", '[{"situational_description_query": "q"}]', "record 0: missing key 'movieSubset'"),
        (
            "ExplicitQuery.json",
            '[{"movieSubset": "Heat", "situational_description_query": "q"}]',
            "record 0: key 'movieSubset' must be a list",
        ),
        ("ImplicitQuery.json", '[{"movieSubset": ["Heat"]}]', "record 0: no query text"),
        (
            "ExplicitQuery.json",
            '[{"movieSubset": ["Heat"], "situational_description_query": "q", "condition_num": "two"}]',
            "record 0: key 'condition_num' must be a non-negative integer",
        ),
        (
            "MisinformedQuery.json",
            '[{"movieSubset": ["Heat"], "query": "q", "sharedRelationships": [["only one"]]}]',
            "record 0: key 'sharedRelationships' must be a list of [relation, value] pairs",
        ),
        ("InterestBasedQuery.json", '[{"query & ground true": [{"query": "q"}]}]', "record 0, query 0"),
        ("ratings.dat", "4242::1::5\n", "ratings.dat:1: expected 4 '::'-separated fields, got 3"),
        ("ratings.dat", "4242::1::5::noon\n", "key 'timestamp': expected a number, got 'noon'"),
        ("ratings.dat", "4242::1::5::1e309\n", "key 'timestamp': expected a finite number, got '1e309'"),
        ("ratings.dat", "4242::1::5::99999999999\n", "is not a date between 1970 and 2100"),
        ("ratings.dat", "4242::1::17::978300760\n", "key 'rating': rating '17' is outside the scale 0.5-5"),
        ("ratings.dat", "4242::1::inf::978300760\n", "key 'rating': expected a finite number, got 'inf'"),
        (
            "MisinformedQuery.json",
            '[{"movieSubset": ["Heat"], "query": "q", "misinformed": [{"movie": "Heat", "person": 7}]}]',
            "record 0: key 'misinformed', entry 0, field 'person': must be a string, got int",
        ),
    ],
)
def test_bad_release_fails_clearly_and_writes_nothing(tmp_path, name, content, message):
    root = _broken_release(tmp_path, name, content)
    out = tmp_path / "out"
    result = run_script("data_prep/recbench.py", "--src", root, "--domain", "movie", "--out", out, check=False)
    assert result.returncode == 2
    assert message in result.stderr and name in result.stderr
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert not out.exists() or not any(out.iterdir())


def test_missing_domain_folder(tmp_path):
    with pytest.raises(DataError, match="no movie folder \\(looked in .*dataset/movie and .*data/movie\\)"):
        read_release(tmp_path, "movie")


def test_no_query_files(tmp_path):
    (tmp_path / "data" / "movie").mkdir(parents=True)
    with pytest.raises(DataError, match="no query records found"):
        read_release(tmp_path, "movie")


def test_missing_optional_files_and_empty_query_files_warn(tmp_path, caplog):
    root = _broken_release(tmp_path, "ImplicitQuery.json", "[]")
    (root / "data" / "movie" / "ratings.dat").unlink()
    (root / "data" / "movie" / "movies.dat").unlink()
    with caplog.at_level("WARNING"):
        release = read_release(root, "movie")
    said = caplog.text
    assert "ImplicitQuery.json: holds no records: no implicit queries" in said
    assert "ratings.dat: not found: queries get no user history" in said
    assert "movies.dat: not found: the catalog holds only titles the queries name, without genres" in said
    assert {"ratings.dat", "movies.dat"} <= set(release.missing_files)


@pytest.mark.parametrize("name", ["ImplicitQuery.json", "ratings.dat", "movies.dat"])
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), "is a folder, not a file"),
        (lambda path: path.symlink_to(path.name), "is a symbolic link that leads back to itself, not a file"),
        (lambda path: path.symlink_to("gone.json"), "is a symbolic link to gone.json, which is not there"),
    ],
)
def test_a_release_file_that_is_no_file_is_named_not_skipped_as_missing(tmp_path, name, make, message):
    # Each was warned about as "not found" and the benchmark built without it: no history, genres or queries.
    root = tmp_path / "release"
    shutil.copytree(RELEASE, root)
    path = root / "data" / "movie" / name
    path.unlink()
    make(path)
    out = tmp_path / "out"
    result = run_script("data_prep/recbench.py", "--src", root, "--domain", "movie", "--out", out, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f"{path}: {message}")
    assert result.stderr.count("\n") == 1
    assert not out.exists()
