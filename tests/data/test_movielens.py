"""MovieLens releases as distributed: every layout read by content, ties, half stars, duplicate titles,
names for ML-1M codes, and the builders on them (no future history, the early stop, ratings-only LLMRec)."""

import gzip
import json
import re

import pytest
from conftest import read_jsonl, read_view, run_script

from perf.movielens_world import LAYOUTS, World, synthetic, write
from rectune.benchmarks import Resources, load_rows
from rectune.benchmarks.perrec import groups as grouping
from rectune.benchmarks.perrec.prompts import build_messages
from rectune.benchmarks.perrec.rows import PerRecRow
from rectune.core.io import DataError
from rectune.data import item_ids, movielens
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import RatingScale, Review, merged_ids, parse_rating, read_items, read_reviews, read_users
from rectune.evaluation.scoring import score_benchmark

# Two users, four films; user 1 rated films 759 and 1274 in the same second (file order: 1274 first)
SMALL = World(
    movies=[
        ("1", "Toy Story (1995)", ["Animation", "Comedy"]),
        ("759", "Fear of a Black Hat (1993)", ["Comedy"]),
        ("1274", "Hamlet (1996)", ["Drama"]),
        ("1275", "Hamlet (1996)", ["Drama"]),
        ("32", "City of Lost Children, The (Cité des enfants perdus, La) (1995)", ["Adventure", "Sci-Fi"]),
    ],
    ratings=[
        ("1", "1274", 4.0, 1000),
        ("1", "759", 3.0, 1000),
        ("1", "1", 5.0, 900),
        ("2", "1275", 2.0, 500),
        ("2", "32", 4.0, 400),
        ("1", "1275", 1.0, 2000),
    ],  # fmt: skip
    users={"1": ("F", 24, "programmer"), "2": ("M", 61, "retired")},
    tags=[("1", "1", "pixar", 1500), ("2", "1", "Pixar", 1600), ("2", "759", "mockumentary", 1700)],
)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_reads_the_same_ratings_and_titles(tmp_path, layout):
    folder = write(tmp_path, layout, SMALL)
    for source in (folder, *(f for f in folder.iterdir() if f.name in ("u.data", "ratings.dat", "ratings.csv"))):
        reviews = read_reviews(source)  # the folder, or its ratings file: decided by content
        assert [(r.user, r.item, r.rating, r.timestamp) for r in reviews] == list(SMALL.ratings)
    items = read_items(folder)
    # one film listed under two ids is one item: the lower id keeps it, the other is recorded
    assert sorted(items, key=int) == ["1", "32", "759", "1274"]
    assert items["1274"].attributes["merged_ids"] == ["1275"]
    assert items["1"].categories == ["Animation", "Comedy"]
    # the catalog keeps the release's spelling; prompts get the natural one, alternate titles dropped
    assert items["32"].title == "City of Lost Children, The (Cité des enfants perdus, La) (1995)"
    assert items["32"].name == "The City of Lost Children (1995)"
    # ratings of the merged id move to the kept one; user 1 rated both copies: the earlier rating stays
    assert merged_ids(items) == {"1275": "1274"}
    with RatingStore(folder, merged_ids(items)) as store:
        histories = store.first_ratings(["1", "2"])
        assert store.moved() == 2
    assert {user: [(r.item, r.rating) for r in history] for user, history in histories.items()} == {
        "1": [("1", 5.0), ("759", 3.0), ("1274", 4.0)],  # by time; 759 and 1274 share a second
        "2": [("32", 4.0), ("1274", 2.0)],
    }


@pytest.mark.parametrize("layout", ["ml-100k", "ml-1m"])
def test_users_come_with_names_not_codes(tmp_path, layout):
    users = read_users(write(tmp_path, layout, SMALL))
    # ML-1M writes age band 18 and occupation code 12; ml-100k the real age 24 and the name
    assert users["1"] == {"gender": "F", "age": "18-24", "occupation": "programmer"}
    assert users["2"] == {"gender": "M", "age": "56+", "occupation": "retired"}


def test_numbers_isdigit_takes_but_int_refuses_are_one_line_not_a_traceback(tmp_path):
    """ "²" is a digit to str.isdigit and no number to int(); 5,000 digits pass int()'s limit: each was a
    ValueError traceback in an ml-100k age or genre index, and in the ids build_benchmark writes as numbers."""
    folder = write(tmp_path / "ages", "ml-100k", SMALL)
    (folder / "u.user").write_text("1|²|F|programmer|12345\n")
    with pytest.raises(DataError, match=r"u.user:1: age '²' is not a whole number \(ml-100k u.user\)$"):
        read_users(folder)
    folder = write(tmp_path / "genres", "ml-100k", SMALL)
    (folder / "u.genre").write_text("Action|0\nComedy|" + "9" * 5000 + "\n")
    with pytest.raises(DataError, match=r"u.genre:2: expected name\|index \(ml-100k u.genre\)$"):
        read_items(folder)
    assert [item_ids.release_id(i) for i in ("759", "0759", "9" * 19, "²", "tt01")] == [759, 759, "9" * 19, "²", "tt01"]


def test_unknown_formats_fail_naming_the_accepted_ones(tmp_path):
    path = tmp_path / "ratings.txt"
    path.write_text("1 2 3 4\n")
    with pytest.raises(DataError, match=r"ratings.txt: unknown format .*ml-100k \(u.data"):
        read_reviews(path)
    with pytest.raises(DataError, match=r"no ratings file in this folder \(looked for u.data, ratings.dat"):
        read_reviews(tmp_path)


def test_a_release_folder_whose_users_file_links_to_nothing_names_it(tmp_path):
    # users.dat linking to a file not copied along was read as missing: a benchmark without demographics
    folder = write(tmp_path / "ml-1m", "ml-1m", SMALL)
    (folder / "users.dat").unlink()
    (folder / "users.dat").symlink_to("../elsewhere/users.dat")
    with pytest.raises(DataError, match=r"users.dat: is a symbolic link to ../elsewhere/users.dat, which is not there"):
        movielens.release_file(folder, "users")  # build_benchmark.py's optional users, as data_prep reads them


def test_csv_titles_with_commas_and_tags(tmp_path):
    world = World(movies=[("5", '"Great Escape, The (1963)"', ["War"])], ratings=[("1", "5", 4.5, 10)])
    folder = write(tmp_path, "ml-latest", world)
    assert read_items(folder)["5"].title == '"Great Escape, The (1963)"'
    write(tmp_path / "tagged", "ml-latest", SMALL)
    tags = movielens.read_tags(tmp_path / "tagged" / "tags.csv")
    assert tags["1"] == {"pixar": 2} and tags["759"] == {"mockumentary": 1}


def test_titles_are_one_line_and_an_untitled_movie_is_named_by_its_id(tmp_path):
    """A control character in a title reached the rows, which loading them then refused: data_prep wrote a set
    that evaluation and training could not read. An empty or all-control title now leaves the movie untitled."""
    release = tmp_path / "ml-1m"
    release.mkdir()
    (release / "movies.dat").write_text("1::Heat\t(1995)::Crime\n2::\x01\x02::Drama\n3::::Comedy\n")
    movies = movielens.read_movies(release / "movies.dat")
    assert {movie.id: movie.title for movie in movies.values()} == {"1": "Heat (1995)"}


def test_ties_are_ordered_by_numeric_item_id():
    events = [Review("1", "1274", 4.0, 1000), Review("1", "759", 3.0, 1000), Review("1", "1", 5.0, 900)]
    # as text "759" > "1274"; as numbers 759 < 1274
    assert [e.item for e in movielens.chronological(events)] == ["1", "759", "1274"]
    assert movielens.tied_events(events) == 2
    # an id past int()'s 4,300 digits, or a digit int() refuses ("²"), stopped build_benchmark with a traceback
    huge = "9" * 5000
    ids = ["10", huge, "x", "²", "9", "1", "01"]
    assert sorted(ids, key=item_ids.id_order) == ["01", "1", "9", "10", huge, "x", "²"]


def test_half_star_scale_is_read_and_parsed():
    assert RatingScale.seen(0.5, 4.5, whole=False).as_list() == [0.5, 5.0, 0.5]
    assert RatingScale.seen(2.0, 2.0, whole=True).as_list() == [1.0, 5.0, 1.0]
    with RatingStore([Review("1", "a", 0.5, 1), Review("1", "b", 4.5, 2)], {}) as store:
        assert store.scale().as_list() == [0.5, 5.0, 0.5]  # the lowest, and the highest of the scale
    assert [parse_rating(t) for t in ("0.5", "4.5 stars", "I'd say 3", "0", "6")] == [0.5, 4.5, 3.0, None, None]


def test_a_rating_that_ends_a_sentence_is_read():
    answers = ("I'd rate it 4.", "Rating: 4.5.", "2.0.\n", "0.5.", "6.", "10.5", "1.2.3", "3 stars.")
    assert [parse_rating(t) for t in answers] == [4.0, 4.5, 2.0, 0.5, None, None, None, 3.0]


def test_perrec_pointwise_prompt_states_the_real_scale():
    row = PerRecRow("g/pointwise/0", "perrecbench", "movies", "pointwise", "g", 2, "easy",
                    {"id": "1", "title": "Toy Story (1995)"}, [
                        {"label": "A", "user": "1", "mean_rating": 3.2, "history": [], "rating": 4.5,
                         "relative_rating": 1.3}], "4.5", [0.5, 5.0, 0.5])  # fmt: skip
    assert "rate the item, on a scale from 0.5 to 5 in half stars?" in build_messages(row)[1]["content"]
    row.scale = None
    assert "rate the item, on a scale from 1 to 5?" in build_messages(row)[1]["content"]


def test_gap_of_exactly_the_threshold_does_not_pass():
    settings = grouping.GroupSettings(min_history=0, min_gap=0.6)
    # a: x 4.6, z 4.0 (mean 4.3); b: x 4.0, z 4.6 (mean 4.3): relative ratings of x +0.3 and -0.3, a gap
    # of exactly 0.6 on paper and 0.5999999999999996 in floats; the same on z
    reviews = [
        Review("a", "x", 4.6, 10),
        Review("a", "z", 4.0, 11),
        Review("b", "x", 4.0, 20),
        Review("b", "z", 4.6, 21),
    ]
    assert list(grouping.find_groups(RatingStore(reviews, {}), settings)) == []
    reviews[0].rating = 4.7  # a's mean 4.35: gaps 0.65 on x and on z
    assert sorted(g.item for g in list(grouping.find_groups(RatingStore(reviews, {}), settings))) == ["x", "z"]


def test_perrec_history_is_rated_before_the_shared_item(tmp_path):
    folder = write(tmp_path / "ml", "ml-latest", synthetic(40, 60, 1600, half_stars=True, seed=2))
    out = tmp_path / "out"
    run_script("data_prep/perrecbench.py", "--reviews", folder, "--domain", "movies", "--min-history", "5",
               "--test-size", "0.3", "--out", out)  # fmt: skip
    when = {(r.user, r.item): r.timestamp for r in read_reviews(folder)}
    titles = {item.name: item.id for item in read_items(folder).values()}  # prompts show natural titles
    rows = read_jsonl(out / "test.jsonl")
    shown = 0
    for row in rows:
        assert row["scale"] == [0.5, 5.0, 0.5]
        for user in row["users"]:
            for entry in user["history"]:
                shown += 1
                assert when[(user["user"], titles[entry["title"]])] < when[(user["user"], row["item"]["id"])]
    assert shown > 0
    assert not list(out.glob("*_mix.jsonl"))  # recipes mix the three formats' files; no duplicate copies
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rating_scale"] == [0.5, 5.0, 0.5] and stats["eligible_users"] == 40
    assert 0 < stats["users_in_groups"] <= 40 and stats["tied_ratings"] > 0
    # the true half-star ratings, pairs and orders score a perfect tau (before: 0.985, "4.5" did not parse)
    rows = load_rows(out / "test.jsonl")
    report, _ = score_benchmark(rows, {row.id: row.answer for row in rows}, Resources(out / "test.jsonl"))
    assert {task: report["by_task"][task]["tau"] for task in report["by_task"]} == {
        "pointwise": 1.0, "pairwise": 1.0, "listwise": 1.0,
    }  # fmt: skip


def test_llmrec_on_ratings_only_builds_three_tasks_and_says_why(tmp_path):
    folder = write(tmp_path / "ml", "ml-1m", synthetic(12, 30, 240, seed=3))
    out = tmp_path / "out"
    result = run_script("data_prep/llmrec.py", "--reviews", folder, "--domain", "movies", "--out", out)
    assert "explanation skipped: the source has ratings only, no review text" in result.stderr
    # the summary line: time, peak memory, and the bytes the folder holds
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    summary = re.search(
        r"done in [\d.]+ s \([\d.]+ CPU-s\), peak (\d+) MB resident, ([\d.]+) MB written", result.stdout
    )
    assert summary and int(summary[1]) > 50 and float(summary[2]) == round(written / 1e6, 1)
    assert {r["task"] for r in read_jsonl(out / "test.jsonl")} == {"rating", "sequential", "direct"}
    with pytest.raises(DataError, match="train.jsonl holds no 'explanation' rows"):
        read_view(out / "train_sft_explanation.jsonl")
    stats = json.loads((out / "stats.json").read_text())
    assert set(stats["skipped_tasks"]) == {"explanation", "summarization"}
    prompt = read_view(out / "train_sft_rating.jsonl")[0]["messages"]
    text = prompt[0]["content"] + prompt[1]["content"]
    assert "recommender system for movies" in text and "earlier ratings" in text
    assert "online shop" not in text and "review" not in text


def test_llmrec_merges_a_film_listed_under_two_ids(tmp_path):
    world = synthetic(30, 40, 900, seed=7)
    last = {}  # each user's test target: their last rating (ties by numeric id)
    for user, item, _, _stamp in sorted(world.ratings, key=lambda r: (r[3], int(r[1]))):
        last[user] = item
    # user 1's test target and a film user 1 never rated become one title listed under two ids
    unrated = sorted({i for i, _, _ in world.movies} - {i for u, i, _, _ in world.ratings if u == "1"}, key=int)
    twins = sorted([last["1"], unrated[0]], key=int)
    world.movies = [(i, "Hamlet (1996)" if i in twins else title, g) for i, title, g in world.movies]
    folder = write(tmp_path / "ml", "ml-100k", world)
    out = tmp_path / "out"
    run_script("data_prep/llmrec.py", "--reviews", folder, "--domain", "movies", "--out", out)
    rows = load_rows(out / "test.jsonl")
    hamlet = [r for r in rows if r.item["title"] == "Hamlet (1996)"]
    # user 1's target is the one film, under the id that kept the title
    assert "1" in {r.user for r in hamlet} and {r.item["id"] for r in hamlet} == {twins[0]}
    for row in rows:
        shown = [h["title"] for h in row.history] + [c["title"] for c in row.candidates or []]
        assert len(shown) == len(set(shown)) and not any("[movie" in t for t in shown)
    catalog = {c["id"]: c for c in read_jsonl(out / "catalog.jsonl")}
    assert catalog[twins[0]]["attributes"]["merged_ids"] == [twins[1]] and twins[1] not in catalog
    assert json.loads((out / "stats.json").read_text())["merged_duplicate_items"] == 1
    report, _ = score_benchmark(rows, {row.id: row.target for row in rows}, Resources(out / "test.jsonl"))
    assert report["by_task"]["sequential"]["hr@1"] == 1.0 and report["by_task"]["direct"]["hr@1"] == 1.0


def test_build_benchmark_from_a_movielens_release(tmp_path):
    folder = write(tmp_path / "ml", "ml-latest", synthetic(60, 300, 3000, half_stars=True, tagged=0.5, seed=4))
    out = tmp_path / "release"
    result = run_script("data_prep/build_benchmark.py", "--movielens", folder, "--out", out)
    assert "no user file: no demographics-based queries" in result.stderr  # ml-latest has no users
    stats = json.loads((out / "stats.json").read_text())
    assert stats["anchor_relations"] == ["Year", "Tag"] and stats["tied_events"] > 0
    assert stats["queries"]["explicit"] > 0 and stats["queries"]["implicit"] > 0
    kg = read_jsonl(out / "kg.jsonl")
    assert {t["relation"] for t in kg} == {"Genre", "Year", "Tag"}
    explicit = json.loads((out / "dataset/movie/ExplicitQuery.json").read_text())
    names = {item.id: item.name for item in read_items(folder).values()}
    for record in explicit:
        assert any(relation in ("Year", "Tag") for relation, _ in record["sharedRelationships"])
        assert record["movieSubset"] == [names[str(i)] for i in record["movieSubsetId"]]
    prepared = tmp_path / "prepared"
    run_script("data_prep/recbench.py", "--src", out, "--domain", "movie", "--kg", out / "kg.jsonl", "--out", prepared)
    assert read_jsonl(prepared / "test.jsonl")


def test_build_benchmark_max_users_builds_from_a_stratified_sample(tmp_path):
    folder = write(tmp_path / "ml", "ml-1m", synthetic(40, 120, 2400, seed=6))
    out = tmp_path / "release"
    run_script("data_prep/build_benchmark.py", "--movielens", folder, "--max-users", "10", "--out", out)
    stats = json.loads((out / "stats.json").read_text())
    sampling = stats["sampling"]
    assert sampling["users"] == {"found": 40, "kept": 10} and sampling["stratified_by"] == "activity"
    assert sum(sampling["found"].values()) == 40 and sum(sampling["kept"].values()) == 10
    for band, kept in sampling["kept"].items():  # each band keeps its share of the 10 places, within one
        assert abs(kept - 10 * sampling["found"][band] / 40) < 1
    assert stats["users"] == 40  # the unsampled total
    rated = {line.split("::")[0] for line in (out / "dataset/movie/ratings.dat").read_text().splitlines()}
    listed = {line.split("::")[0] for line in (out / "dataset/movie/users.dat").read_text().splitlines()}
    assert len(rated) == 10 and listed == rated
    for name in ("ExplicitQuery.json", "ImplicitQuery.json", "MisinformedQuery.json"):
        records = json.loads((out / "dataset/movie" / name).read_text())
        assert records and {r["source_user"] for r in records} <= rated, name


def test_build_without_an_anchor_relation_stops_before_searching(tmp_path):
    folder = write(tmp_path / "ml", "ml-1m", synthetic(10, 30, 200, seed=5))
    out = tmp_path / "release"
    result = run_script("data_prep/build_benchmark.py", "--movielens", folder, "--anchor-relations", "Director",
                        "--out", out, check=False)  # fmt: skip
    assert result.returncode == 2
    assert "no item has an anchor relation (Director)" in result.stderr and "Genre, Year" in result.stderr
    assert not out.exists()


def test_ml1m_demographics_queries_use_occupation_names(tmp_path):
    folder = write(tmp_path / "ml", "ml-1m", synthetic(80, 120, 2400, seed=6))
    out = tmp_path / "release"
    run_script("data_prep/build_benchmark.py", "--movielens", folder, "--out", out)
    groups = json.loads((out / "dataset/movie/DemographicsBasedQuery.json").read_text())
    summaries = [g["summary"] for g in groups if g["group_type"] == "occupation"]
    assert summaries and all(not s.split("working as ")[1][0].isdigit() for s in summaries)


def test_interest_pairs_use_strictly_ordered_events_only():
    from rectune.benchmarks.recbench.builder import BenchmarkBuilder, BuildSettings
    from rectune.data.titles import CatalogItem

    items = [CatalogItem(str(i), f"Film {i} (1990)", {"Genre": ["Drama"]}) for i in range(1, 5)]
    # three users watch 1, 2, 3, 4 in that order; for user c, 1 and 2 share a second
    histories = {user: ["1", "2", "3", "4"] for user in "abc"}
    times = {"a": [10, 20, 30, 40], "b": [10, 20, 30, 40], "c": [10, 10, 30, 40]}

    def pairs(settings, with_times=True):
        records = BenchmarkBuilder(items, settings).interest_queries(histories, times if with_times else None)
        return {tuple(r["Shared consecutive movies"]): sorted(r["source_users"]) for r in records}

    # (3, 4) has no follow-up in anyone's history, so it makes no query
    strict = pairs(BuildSettings(min_consecutive_users=2))
    assert strict == {
        ("Film 1 (1990)", "Film 2 (1990)"): ["a", "b"],
        ("Film 2 (1990)", "Film 3 (1990)"): ["a", "b", "c"],
    }
    tied = pairs(BuildSettings(min_consecutive_users=2, allow_tied_pairs=True))
    assert tied[("Film 1 (1990)", "Film 2 (1990)")] == ["a", "b", "c"]  # c's tied pair counts when asked


def test_perrec_retrieval_text_leaves_the_year_out():
    from rectune.data.titles import CatalogItem

    item = CatalogItem("1", "Heat (1995)", {"categories": ["Crime", "Thriller"]})
    assert grouping._tokens(grouping._item_text(item, "1")) == ["heat", "crime", "thriller"]


def test_llmrec_rating_prompt_states_half_stars():
    from rectune.benchmarks.llmrec.prompts import build_messages as llmrec_messages
    from rectune.benchmarks.llmrec.rows import LLMRecRow

    row = LLMRecRow("rating/1", "llmrec", "movies", "rating", "1", [], {"id": "1", "title": "Heat (1995)"}, "4.5",
                    scale=[0.5, 5.0, 0.5], feedback="ratings")  # fmt: skip
    assert "Answer with a single number from 0.5 to 5 in half stars." in llmrec_messages(row)[1]["content"]
    assert LLMRecRow.from_dict(row.to_dict()) == row


def test_a_line_past_the_cap_stops_the_read_in_one_line(tmp_path, monkeypatch):
    # a gzip file of one megabyte held a line of a gigabyte, read whole: 2.2 GB resident before anything was said
    monkeypatch.setattr(movielens, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "reviews.json.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b"x" * 999 + b"\n" + b"y" * 1000 + b"\n")  # 1,000 bytes with its newline, then 1,001
    read = movielens.lines(path)
    assert next(read) == (1, "x" * 999)
    with pytest.raises(DataError) as caught:
        next(read)
    assert str(caught.value) == (
        f"{path}:2: a line longer than 1,000 bytes: no release has one (a damaged file, or one inflating without end?)"
    )
