"""RecBench+ as its authors published it: both release layouts, their ids, their prompts and request
files, their answer files, and their evaluator's per-query numbers (each computed by hand below)."""

import json
import math
import shutil
from difflib import SequenceMatcher

import pytest
from conftest import RELEASE, run_script

from rectune.benchmarks.recbench.official import predicted_titles, replace_similar
from rectune.benchmarks.recbench.release import read_release
from rectune.core.io import DataError

IDCG_2 = 1 + 1 / math.log2(3)  # ideal DCG of two ground-truth items
MOVIES = """1::Heat (1995)::Action|Crime|Thriller
2::Ronin (1998)::Action|Crime|Thriller
3::Casablanca (1942)::Drama|Romance|War
4::Ferris Bueller's Day Off (1986)::Comedy
5::Goonies, The (1985)::Adventure|Children's
13::Casino (1995)::Drama
"""
RATINGS = "7::4::5::100\n7::5::4::200\n7::3::5::300\n7::1::5::400\n"  # Heat, rated last, is ground truth
EXPLICIT = [
    {"data_idx": 3862, "source_user": "7", "condition_num": 1, "movieCount": 2,
     "movieSubset": ["Heat (1995)", "Ronin (1998)"], "movieSubsetId": [1, 2],
     "sharedRelationships": [["Genre", "Thriller"]],
     "direct_description_query": "Recommend thrillers.", "situational_description_query": "A tense thriller, please."},
    {"data_idx": 17, "source_user": "7", "condition_num": 1, "movieCount": 1, "movieSubset": ["Casino (1995)"],
     "movieSubsetId": [13], "sharedRelationships": [["Genre", "Drama"]],
     "direct_description_query": "Recommend dramas.", "situational_description_query": "A Vegas drama."},
]  # fmt: skip
TEEN = ["Ferris Bueller's Day Off (1986)", "Goonies, The (1985)"]
INTEREST = [
    {"Shared consecutive movies": ["Heat (1995)", "Ronin (1998)"], "source_users": ["7"],
     "query & ground true": [
         {},  # the authors skip empty entries when they number queries
         {"reason": "romance", "query": "A classic romance?", "movie subset": ["Casablanca (1942)"]},
         {"reason": "teens", "query": "80s teen films?", "movie subset": TEEN}]},
]  # fmt: skip
DEMOGRAPHICS = [
    {"data_idx": 0, "group_type": "age", "group": "Under 18", "top_10_movies": [[4, 0.9]], "summary": "Teens.",
     "query & ground true": [{"reason": "teens", "query": "Fun films for a teenager?", "movie subset": TEEN}]},
]  # fmt: skip
BOOKS = [
    {"data_idx": 5, "condition_num": 1, "bookCount": 1, "bookSubset": ["The Shining (1977)"], "bookSubsetId": [501],
     "sharedRelationships": [["Author", "Stephen King"]], "situational_description_query": "A scary novel."},
]  # fmt: skip


def write_release(root, layout="dataset", demographics="DemographicsBasedQuery.json"):
    """A small release in the authors' layout, with the real-world .DS_Store beside the files."""
    movie, book = root / layout / "movie", root / layout / "book"
    movie.mkdir(parents=True)
    book.mkdir(parents=True)
    (movie / "movies.dat").write_text(MOVIES, encoding="latin-1")
    (movie / "ratings.dat").write_text(RATINGS)
    for name, records in (("ExplicitQuery.json", EXPLICIT), ("InterestBasedQuery.json", INTEREST)):
        (movie / name).write_text(json.dumps(records))
    (movie / demographics).write_text(json.dumps(DEMOGRAPHICS))
    (book / "ExplicitQuery.json").write_text(json.dumps(BOOKS))
    for folder in (root / layout, movie):
        (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    return root


@pytest.fixture(scope="module")
def paper_data(tmp_path_factory):
    """The release converted with every query held out, one folder per domain."""
    root = write_release(tmp_path_factory.mktemp("release"))
    out = {}
    for domain in ("movie", "book"):
        out[domain] = tmp_path_factory.mktemp(domain)
        run_script("data_prep/recbench.py", "--src", root, "--domain", domain, "--out", out[domain], "--test-size", "1")
    return out


def test_current_and_earlier_layouts_read_alike(tmp_path):
    current = read_release(write_release(tmp_path / "current"), "movie")
    earlier = read_release(write_release(tmp_path / "earlier", "data", "UserBasedQuery.json"), "movie")
    assert [r.to_dict() for r in current.rows] == [r.to_dict() for r in earlier.rows]
    ids = [r.id for r in current.rows]
    # condition queries keep data_idx; profile queries count the non-empty entries of their record
    assert ids == [
        "movie/explicit/3862", "movie/explicit/17", "movie/interest/0-0", "movie/interest/0-1",
        "movie/demographics/0-0",
    ]  # fmt: skip
    assert current.rows[2].ground_truth == ["Casablanca (1942)"]
    assert current.missing_files == ["ImplicitQuery.json", "MisinformedQuery.json"]


def test_the_shipped_fixture_in_the_current_layout(tmp_path):
    shutil.copytree(RELEASE / "data", tmp_path / "dataset")
    (tmp_path / "dataset/movie/UserBasedQuery.json").rename(tmp_path / "dataset/movie/DemographicsBasedQuery.json")
    assert [r.to_dict() for r in read_release(tmp_path, "movie").rows] == [
        r.to_dict() for r in read_release(RELEASE, "movie").rows
    ]


def test_missing_release_names_both_folders(tmp_path):
    with pytest.raises(DataError, match=r"looked in .*/dataset/book and .*/data/book"):
        read_release(tmp_path, "book")


def test_duplicate_data_idx_is_refused(tmp_path):
    root = write_release(tmp_path)
    (root / "dataset/movie/ExplicitQuery.json").write_text(json.dumps([EXPLICIT[0], EXPLICIT[0]]))
    with pytest.raises(DataError, match="ExplicitQuery.json: record 1: data_idx 3862 is used by an earlier record"):
        read_release(root, "movie")


def test_official_rules_by_hand():
    # pieces: stripped of spaces, quotes, then a trailing year; empty ones kept; K cuts and pads
    assert predicted_titles(" 'Heat (1995)' [SEP]\"Ronin\"[SEP] ") == ["Heat", "Ronin", ""]
    assert predicted_titles("A [SEP] B", k=3) == ["A", "B", "none"]
    assert predicted_titles("A [SEP] B [SEP] C", k=2) == ["A", "B"]
    # a short year-less title is below 0.8 against the ground-truth spelling: missed
    assert SequenceMatcher(None, "Casablanca", "Casablanca (1942)").ratio() == pytest.approx(20 / 27)
    assert replace_similar(["Casablanca"], ["Casablanca (1942)"], 0.8) == ["Casablanca"]
    # the same kind of miss for movies is a hit under the books' 0.65
    assert SequenceMatcher(None, "The Shining", "The Shining (1977)").ratio() == pytest.approx(22 / 29)
    assert replace_similar(["The Shining"], ["The Shining (1977)"], 0.8) == ["The Shining"]
    assert replace_similar(["The Shining"], ["The Shining (1977)"], 0.65) == ["The Shining (1977)"]


def test_official_matching_compares_in_full_only_what_could_reach_the_threshold(monkeypatch):
    full = []
    ratio = SequenceMatcher.ratio
    monkeypatch.setattr(SequenceMatcher, "ratio", lambda self: full.append((self.a, self.b)) or ratio(self))
    # 50,000 pieces of one spelling, looked at once: "Heat" too short for "Heat (1995)" (2 x 4 / 15 < 0.8);
    # "Casino 1995" as long, but only 6 of its 11 characters are in "Heat (1995)" (2 x 6 / 22 < 0.8); "Heat 1995"
    # shares 9 (2 x 9 / 20 = 0.9) and is compared in full: its matching blocks "Heat " and "1995" give 0.9 too
    answer = "Heat [SEP] " * 50_000 + "Casino 1995 [SEP] Heat 1995"
    matched = replace_similar(predicted_titles(answer), ["Heat (1995)"], 0.8)
    assert matched == ["Heat"] * 50_000 + ["Casino 1995", "Heat (1995)"]
    assert full == [("Heat 1995", "Heat (1995)")]
    # the first title similar enough wins, as in their loop
    assert replace_similar(["Heat (1995"], ["Heat (1996)", "Heat (1995)"], 0.8) == ["Heat (1996)"]


def write_answer_files(folder):
    """The movie answers in the authors' three file shapes, the book answer as an OpenAI batch output."""
    explicit = [
        {"id": 3862, "response": "Heat [SEP] Casino [SEP] Made Up Film"},
        {"id": 17, "response": "Completely Invented Picture [SEP] Another Invented Picture"},
    ]
    interest = [
        {"id": "0-0", "response": "Casablanca [SEP] Heat", "reasoning": "Casablanca (1942) [SEP] Heat"},
        {"id": "0-1", "response": "Ferris Bueller's Day Off [SEP] The Goonies [SEP]"},
    ]
    files = {
        "explicit": folder / "movie-ExplicitQuery_m-prediction.jsonl",
        "interest": folder / "movie-ItemBasedQuery_m-OpenaiBatchFile-0_output.json",  # JSON lines, named .json
        "demographics": folder / "movie-UserBasedQuery_m-prediction.json",
        "book": folder / "book-ExplicitQuery_m-OpenaiBatchFile-0_output.jsonl",
    }
    files["explicit"].write_text("".join(json.dumps(a) + "\n" for a in explicit))
    files["interest"].write_text("".join(json.dumps(a) + "\n" for a in interest))
    files["demographics"].write_text(json.dumps([{"id": "0-0", "response": "Ferris Bueller's Day Off"}]))
    message = {"role": "assistant", "content": "The Shining [SEP] It", "reasoning_content": "The Stand [SEP]"}
    body = {"choices": [{"message": message}]}
    batch = {"id": "batch_req_1", "custom_id": "5", "error": None, "response": {"status_code": 200, "body": body}}
    files["book"].write_text(json.dumps(batch) + "\n")
    return files


def score(data, answers, task, metrics, tmp_path):
    report = tmp_path / f"{task}-{metrics}.json"
    run_script("evaluate/score.py", "--data", data / "test.jsonl", "--predictions", answers, "--task", task,
               "--metrics", metrics, "--out", report)  # fmt: skip
    report = json.loads(report.read_text())
    return report, {entry["id"]: entry for entry in report["per_query"]}


def test_official_per_query_scores_of_published_answer_files(paper_data, tmp_path):
    files = write_answer_files(tmp_path)
    movie = paper_data["movie"]

    report, entries = score(movie, files["explicit"], "explicit", "official", tmp_path)
    assert report["metrics"] == ["precision", "recall", "ndcg", "cmr", "ftr"]
    assert report["convention"].startswith("official")
    heat = entries["movie/explicit/3862"]
    # titles miss (Heat vs "Heat (1995)" is 0.53); by catalog id Heat hits: R 1/2, P 1/3 (3 pieces), NDCG at rank 1
    assert (heat["recall"], heat["precision"]) == (pytest.approx(1 / 2), pytest.approx(1 / 3))
    assert heat["ndcg"] == pytest.approx(1 / IDCG_2)
    assert heat["ftr"] == 0.0
    # found in the KG: Heat (ground truth, counts as meeting the conditions) and Casino (a drama): 1/2
    assert heat["cmr"] == pytest.approx(1 / 2)
    assert heat["existence_in_kg_ratio"] == pytest.approx(2 / 3)
    invented = entries["movie/explicit/17"]
    assert invented["cmr"] == -1  # nothing in the KG: left out of the average
    assert report["by_task"]["explicit"]["cmr"] == pytest.approx(1 / 2)
    assert report["by_task"]["explicit"]["recall"] == pytest.approx(1 / 4)

    _, entries = score(movie, files["interest"], "interest", "official", tmp_path)
    casablanca = entries["movie/interest/0-0"]
    assert (casablanca["recall"], casablanca["precision"], casablanca["cmr"]) == (0.0, 0.0, None)
    teens = entries["movie/interest/0-1"]
    # Ferris hits (48/55 >= 0.8); "The Goonies" and the empty piece after the trailing [SEP] do not
    assert SequenceMatcher(None, "The Goonies", "Goonies, The (1985)").ratio() < 0.8
    assert (teens["recall"], teens["precision"], teens["ftr"]) == (pytest.approx(1 / 2), pytest.approx(1 / 3), 0.0)
    assert teens["ndcg"] == pytest.approx(1 / IDCG_2)

    _, entries = score(movie, files["demographics"], "demographics", "official", tmp_path)
    one_title = entries["movie/demographics/0-0"]
    assert one_title["ftr"] == 1.0  # no [SEP]: a failure to recommend ...
    assert one_title["recall"] == pytest.approx(1 / 2)  # ... that still hits
    assert one_title["precision"] == 1.0

    book_report, entries = score(paper_data["book"], files["book"], "explicit", "official", tmp_path)
    shining = entries["book/explicit/5"]
    assert (shining["recall"], shining["precision"], shining["ndcg"], shining["cmr"]) == (1.0, 0.5, 1.0, 1.0)


def test_default_metrics_on_the_same_answers(paper_data, tmp_path):
    files = write_answer_files(tmp_path)
    movie = paper_data["movie"]
    _, entries = score(movie, files["interest"], "interest", "default", tmp_path)
    casablanca = entries["movie/interest/0-0"]
    assert (casablanca["recall"], casablanca["precision"]) == (1.0, 0.5)  # the catalog knows "Casablanca"
    assert casablanca["ndcg"] == 1.0
    teens = entries["movie/interest/0-1"]
    assert (teens["recall"], teens["precision"], teens["ndcg"]) == (1.0, 1.0, 1.0)  # The Goonies resolves
    report, entries = score(movie, files["explicit"], "explicit", "default", tmp_path)
    heat = entries["movie/explicit/3862"]
    # Heat, Casino and an unknown title: 1 hit of 3; only Heat is a thriller
    assert (heat["recall"], heat["precision"], heat["cmr"]) == (
        pytest.approx(1 / 2),
        pytest.approx(1 / 3),
        pytest.approx(1 / 3),
    )
    assert report["convention"].startswith("default")


def test_bare_ids_need_a_task(paper_data, tmp_path):
    files = write_answer_files(tmp_path)
    movie = paper_data["movie"]
    result = run_script("evaluate/score.py", "--data", movie / "test.jsonl", "--predictions", files["interest"],
                        "--out", tmp_path / "r.json", check=False)  # fmt: skip
    assert result.returncode == 2
    assert "id '0-0' names 2 queries; pass --task (demographics, interest)" in result.stderr


EXPECTED_REQUESTS = [
    # no history, no K: the authors' request for a condition query, byte for byte
    '{"custom_id": "movie/explicit/3862", "method": "POST", "url": "/v1/chat/completions", "body": {"model": '
    '"DeepSeek-V3", "messages": [{"role": "system", "content": "You are a movie recommender system. You are given '
    "a query from the user. You need to recommend movies that satisfy the user's query. Please output the "
    'recommended movies directly, do not output other content."}, {"role": "user", "content": "Query: A tense '
    'thriller, please.\\nRecommended movies (separated by [SEP]):"}], "max_tokens": 2000}}',
    # with history and K = 5: two spaces before the 5, the history as a Python list in MovieLens spelling
    '{"custom_id": "movie/explicit/3862", "method": "POST", "url": "/v1/chat/completions", "body": {"model": '
    '"DeepSeek-V3", "messages": [{"role": "system", "content": "You are a movie recommender system. You are given '
    "a user's watched movies and a query from the user. You need to recommend movies that satisfy the user's "
    'query and user preferences. Please output  5 recommended movies directly, do not output other content."}, '
    '{"role": "user", "content": "The user has watched the following movies:[\\"Ferris Bueller\'s Day Off '
    "(1986)\\\", 'Goonies, The (1985)', 'Casablanca (1942)']\\nQuery: A tense thriller, please.\\nRecommended "
    'movies (separated by [SEP]):"}], "max_tokens": 2000}}',
]


@pytest.mark.parametrize(
    "variant, expected", [((), EXPECTED_REQUESTS[0]), (("--with-history", "--k", "5"), EXPECTED_REQUESTS[1])]
)
def test_batch_requests_are_the_authors(paper_data, tmp_path, variant, expected):
    out = tmp_path / "batch"
    run_script("evaluate/run.py", "--backend", "openai-batch", "--model", "DeepSeek-V3", "--data",
               paper_data["movie"] / "test.jsonl", "--out", out, "--no-wandb", *variant)  # fmt: skip
    lines = (out / "batch_requests.jsonl").read_text().splitlines()
    assert len(lines) == 5
    assert lines[0] == expected


def test_batch_output_is_scored(paper_data, tmp_path):
    out = tmp_path / "batch"
    data = paper_data["movie"] / "test.jsonl"
    base = ("evaluate/run.py", "--backend", "openai-batch", "--model", "gpt-4o", "--data", data, "--out", out)
    run_script(*base, "--no-wandb")
    requests = [json.loads(line) for line in (out / "batch_requests.jsonl").read_text().splitlines()]
    answers = {"movie/explicit/3862": "Heat [SEP] Ronin", "movie/interest/0-1": "Ferris Bueller's Day Off"}
    output = tmp_path / "output.jsonl"
    with output.open("w") as handle:
        for request in requests:
            content = answers.get(request["custom_id"], "Casino")
            body = {"model": "gpt-4o-2024-08-06", "choices": [{"message": {"role": "assistant", "content": content}}]}
            handle.write(
                json.dumps({"custom_id": request["custom_id"], "response": {"status_code": 200, "body": body}}) + "\n"
            )
    run_script(*base, "--batch-output", output, "--metrics", "official", "--no-wandb")
    report = json.loads((out / "report.json").read_text())
    entries = {e["id"]: e for e in report["per_query"]}
    assert entries["movie/explicit/3862"]["recall"] == 1.0  # by catalog id
    assert entries["movie/interest/0-1"]["ftr"] == 1.0
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["id"]: p["completion"] for p in predictions}["movie/explicit/3862"] == "Heat [SEP] Ronin"


def test_batch_output_missing_an_answer_is_refused(paper_data, tmp_path):
    out = tmp_path / "batch"
    data = paper_data["movie"] / "test.jsonl"
    base = ("evaluate/run.py", "--backend", "openai-batch", "--model", "gpt-4o", "--data", data, "--out", out)
    output = tmp_path / "output.jsonl"
    output.write_text(json.dumps({"custom_id": "movie/explicit/17", "response": {"body": {"choices": []}}}) + "\n")
    result = run_script(*base, "--batch-output", output, "--no-wandb", check=False)
    assert result.returncode == 2
    assert "output.jsonl: 4 test ids have no prediction: movie/explicit/3862" in result.stderr
    assert not (out / "predictions.jsonl").exists()
