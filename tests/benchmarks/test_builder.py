"""The RecBench+-style benchmark builder and the embedded demo world."""

import json

import pytest
from conftest import run_script

from rectune.benchmarks import load_rows
from rectune.benchmarks.recbench.builder import BenchmarkBuilder, BuildSettings, load_items
from rectune.benchmarks.recbench.query_text import describe
from rectune.core.io import DataError
from rectune.data.demo_world import load_films, simulate
from rectune.data.titles import CatalogItem

ITEMS = [
    CatalogItem(
        "1",
        "Heat (1995)",
        {"Director": ["Michael Mann"], "Starring": ["Al Pacino", "Robert De Niro"], "Genre": ["Crime", "Thriller"]},
    ),
    CatalogItem(
        "2", "Collateral (2004)", {"Director": ["Michael Mann"], "Starring": ["Tom Cruise"], "Genre": ["Thriller"]}
    ),
    CatalogItem(
        "3", "The Insider (1999)", {"Director": ["Michael Mann"], "Starring": ["Al Pacino"], "Genre": ["Drama"]}
    ),
    CatalogItem(
        "4",
        "Taxi Driver (1976)",
        {"Director": ["Martin Scorsese"], "Starring": ["Robert De Niro"], "Genre": ["Crime", "Drama"]},
    ),
    CatalogItem(
        "5", "Casino (1995)", {"Director": ["Martin Scorsese"], "Starring": ["Robert De Niro"], "Genre": ["Crime"]}
    ),
    CatalogItem(
        "6", "Goodfellas (1990)", {"Director": ["Martin Scorsese"], "Starring": ["Robert De Niro"], "Genre": ["Crime"]}
    ),
    CatalogItem(
        "7", "Scarface (1983)", {"Director": ["Brian De Palma"], "Starring": ["Al Pacino"], "Genre": ["Crime"]}
    ),
    CatalogItem(
        "8", "Toy Story (1995)", {"Director": ["John Lasseter"], "Starring": ["Tom Hanks"], "Genre": ["Animation"]}
    ),
    CatalogItem(
        "9", "Toy Story 2 (1999)", {"Director": ["John Lasseter"], "Starring": ["Tom Hanks"], "Genre": ["Animation"]}
    ),
    CatalogItem(
        "10", "Forrest Gump (1994)", {"Director": ["Robert Zemeckis"], "Starring": ["Tom Hanks"], "Genre": ["Drama"]}
    ),
]
HISTORIES = {
    "a": ["1", "2", "3", "4", "5"],
    "b": ["4", "5", "6", "7", "1"],
    "c": ["8", "9", "10", "1", "3"],
    "d": ["8", "9", "4", "6", "5"],
    "e": ["8", "9", "10", "7", "1"],
    "f": ["2", "1", "3", "6", "4"],
}
USERS = {
    u: {"gender": g, "age": a, "occupation": "student"}
    for u, g, a in [
        ("a", "M", "25"),
        ("b", "M", "25"),
        ("c", "F", "18"),
        ("d", "F", "18"),
        ("e", "F", "25"),
        ("f", "M", "18"),
    ]
}


@pytest.fixture(scope="module")
def built():
    builder = BenchmarkBuilder(
        ITEMS, BuildSettings(seed=3, queries_per_user=3, min_consecutive_users=2, min_group_users=2)
    )
    records = builder.condition_queries(HISTORIES)
    records["interest"] = builder.interest_queries(HISTORIES)
    records["demographics"] = builder.demographics_queries(HISTORIES, USERS)
    return records


def holds(item_id, relation, value):
    return value in next(i for i in ITEMS if i.id == item_id).attributes.get(relation, [])


def test_every_ground_truth_item_meets_the_conditions(built):
    assert sum(len(built[t]) for t in ("explicit", "implicit", "misinformed")) >= 6
    for task in ("explicit", "implicit", "misinformed"):
        for record in built[task]:
            assert 1 <= len(record["sharedRelationships"]) <= 4
            assert record["movieSubsetId"]
            for item_id in record["movieSubsetId"]:
                assert all(holds(str(item_id), r, v) for r, v in record["sharedRelationships"]), record
            # the conditions are shared by at least two items of the user's history
            history = HISTORIES[record["source_user"]]
            sharing = [i for i in history if all(holds(i, r, v) for r, v in record["sharedRelationships"])]
            assert len(sharing) >= 2
    explicit = built["explicit"][0]
    for _, value in explicit["sharedRelationships"]:
        assert value.lower() in explicit["situational_description_query"].lower()


def test_implicit_references_point_to_the_hidden_value(built):
    assert built["implicit"]
    for record in built["implicit"]:
        (hint,) = record["multihop_info"]
        reference = next(i for i in ITEMS if i.title == hint["movie"])
        assert reference.attributes[hint["relation"]][0] == hint["person"]
        assert [hint["relation"], hint["person"]] in record["sharedRelationships"]
        assert hint["person"] not in record["situational_description_query"]  # the value stays hidden
        assert hint["movie"] in record["situational_description_query"]
        assert int(reference.id) not in record["movieSubsetId"]


def test_misinformed_claims_are_really_false(built):
    assert built["misinformed"]
    for record in built["misinformed"]:
        (claim,) = record["misinformed"]
        subject = next(i for i in ITEMS if i.title == claim["movie"])
        assert claim["person"] not in subject.attributes[claim["relation"]]
        assert claim["original person"] in subject.attributes[claim["relation"]]
        assert claim["person"] in record["query"] and claim["movie"] in record["query"]
        assert int(subject.id) not in record["movieSubsetId"]


def test_interest_and_demographics(built):
    toy = next(
        r for r in built["interest"] if r["Shared consecutive movies"] == ["Toy Story (1995)", "Toy Story 2 (1999)"]
    )
    assert sorted(toy["source_users"]) == ["c", "d", "e"]
    # after Toy Story 1 and 2: c and e watched Forrest Gump, d watched Taxi Driver
    assert toy["query & ground true"][0]["movie subset"] == ["Forrest Gump (1994)", "Taxi Driver (1976)"]
    groups = {(r["group_type"], r["group"]) for r in built["demographics"]}
    assert ("gender", "F") in groups and ("age", "18") in groups
    women = next(r for r in built["demographics"] if (r["group_type"], r["group"]) == ("gender", "F"))
    # Toy Story is watched by all three women and by no man: the most distinctive
    assert women["query & ground true"][0]["movie subset"][:2] == ["Toy Story (1995)", "Toy Story 2 (1999)"]


def test_build_is_deterministic_for_a_seed():
    def build(seed):
        builder = BenchmarkBuilder(ITEMS, BuildSettings(seed=seed, queries_per_user=3))
        return json.dumps(builder.condition_queries(HISTORIES))

    assert build(1) == build(1)
    assert build(1) != build(2)


def test_rewrites_that_drop_a_name_are_discarded():
    rewrites = iter(["Got any Michael Mann flicks?", "something good please"] * 50)
    builder = BenchmarkBuilder(ITEMS, BuildSettings(seed=0, queries_per_user=1), rewrite=lambda _: next(rewrites))
    records = builder.condition_queries(HISTORIES)
    texts = [r["situational_description_query"] for r in records["explicit"]]
    assert all("something good please" not in t for t in texts)


def test_rewrites_that_are_no_request_are_discarded():
    """A served model that ignores the token limit rambles on one line, or writes control characters: its
    "rewrite" kept every name, so it became the query."""
    for ramble in (lambda text: f"{text} {'and so on ' * 500}", lambda text: f"{text}\x1b[2J"):
        plain = BenchmarkBuilder(ITEMS, BuildSettings(seed=0, queries_per_user=1)).condition_queries(HISTORIES)
        builder = BenchmarkBuilder(ITEMS, BuildSettings(seed=0, queries_per_user=1), rewrite=ramble)
        assert builder.condition_queries(HISTORIES) == plain
    short = BenchmarkBuilder(ITEMS, BuildSettings(seed=0, queries_per_user=1), rewrite=lambda text: f"{text} pls")
    texts = [r["situational_description_query"] for r in short.condition_queries(HISTORIES)["explicit"]]
    assert texts and all(t.endswith(" pls") for t in texts)  # a rewrite of a request's length is taken


def test_rewrites_are_kept_or_discarded_by_rule():
    """A deterministic stand-in for the rewriting model, so both branches of the check run.

    It keeps every word of queries about a director (a rewrite that keeps all names: accepted) and
    replaces every other query with a name-free sentence (rejected: the template text stays).
    """

    def rewrite(text: str) -> str:
        return f"Could you find me this: {text}" if "directed by" in text else "Any good movies tonight?"

    def build(rewriter):
        return BenchmarkBuilder(ITEMS, BuildSettings(seed=0, queries_per_user=3), rewrite=rewriter).condition_queries(
            HISTORIES
        )

    plain, rewritten = build(None), build(rewrite)
    kept = discarded = 0
    for task, key in (("explicit", "situational_description_query"), ("misinformed", "query")):
        assert len(plain[task]) == len(rewritten[task])  # rewriting draws nothing from the seeded generator
        for before, after in zip(plain[task], rewritten[task], strict=True):
            if "directed by" in before[key]:
                assert after[key] == f"Could you find me this: {before[key]}"
                kept += 1
            else:
                assert after[key] == before[key]
                discarded += 1
    assert kept and discarded  # both branches ran


def test_describe():
    assert (
        describe([("Genre", "Thriller"), ("Starring", "Robert De Niro")]) == "thriller movies starring Robert De Niro"
    )
    assert describe([("Director", "Michael Mann"), ("Composer", "Hans Zimmer")]) == (
        "movies directed by Michael Mann and with music by Hans Zimmer"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "1", "relations": {}}', "field 'title': must be a non-empty string"),
        ('{"id": "1", "title": "X", "relations": ["Genre"]}', "field 'relations'"),
        ('{"id": "1", "title": "X", "relations": {"Genre": "Drama"}}', "field 'relations'"),
        ("{broken", "malformed JSON"),
        ('{"id": "1", "title": "Heat\\n# x", "relations": {}}', r"field 'title': holds a control character \('\\n'\)"),
        ('{"id": "1", "title": "Heat\\u2028", "relations": {}}', "field 'title': holds a control character"),
        ('{"id": "1\\t", "title": "Heat", "relations": {}}', "field 'id': holds a control character"),
        ("[" * 100_000 + "]" * 100_000, "malformed JSON: nested too deeply"),
    ],
)
def test_bad_kg_rows_fail_clearly(tmp_path, line, message):
    path = tmp_path / "kg.jsonl"
    path.write_text('{"id": "0", "title": "Fine", "relations": {}}\n' + line + "\n")
    with pytest.raises(DataError, match=f"kg.jsonl:2: .*{message}"):
        load_items(path)


def test_demo_world_end_to_end(tmp_path):
    films = load_films()
    assert len(films) >= 250 and len({f.title for f in films}) == len(films)
    assert simulate(films, 20, seed=1) == simulate(films, 20, seed=1)
    world, release, prepared = tmp_path / "world", tmp_path / "release", tmp_path / "prepared"
    run_script("data_prep/demo_world.py", "--out", world)
    run_script(
        "data_prep/build_benchmark.py",
        "--kg",
        world / "items.jsonl",
        "--ratings",
        world / "ratings.dat",
        "--users",
        world / "users.dat",
        "--out",
        release,
    )
    run_script(
        "data_prep/recbench.py",
        "--src",
        release,
        "--domain",
        "movie",
        "--kg",
        release / "kg.jsonl",
        "--out",
        prepared,
        "--test-size",
        "1.0",
    )
    rows = load_rows(prepared / "test.jsonl")
    assert {r.task for r in rows} == {"explicit", "implicit", "misinformed", "interest", "demographics"}
    assert json.loads((prepared / "stats.json").read_text())["unresolved_ground_truth"]["count"] == 0
    titles = {f.id: f.title for f in films}
    for row in rows:
        assert not set(row.history) & {titles[i] for i in row.ground_truth_ids}  # H'_u = H_u minus G_q

    bad = tmp_path / "bad.dat"
    bad.write_text("1::9999::5::1\n")
    result = run_script(
        "data_prep/build_benchmark.py",
        "--kg",
        world / "items.jsonl",
        "--ratings",
        bad,
        "--users",
        world / "users.dat",
        "--out",
        tmp_path / "x",
        check=False,
    )
    assert "item '9999' is not in the KG" in result.stderr and not (tmp_path / "x").exists()


def test_rewrite_with_a_local_model_keeps_names(tmp_path, tiny_model):
    """--rewrite-model runs a real (tiny, random) chat model; rewrites that lose a name fall back to the template."""
    kg = tmp_path / "items.jsonl"
    kg.write_text("".join(json.dumps({"id": i.id, "title": i.title, "relations": i.attributes}) + "\n" for i in ITEMS))
    ratings = tmp_path / "ratings.dat"
    ratings.write_text(
        "".join(f"{u}::{item}::4::{t}\n" for u, items in HISTORIES.items() for t, item in enumerate(items))
    )
    users = tmp_path / "users.dat"
    users.write_text("".join(f"{u}::{p['gender']}::{p['age']}::student::0\n" for u, p in USERS.items()))
    outputs = {}
    for name, extra in (("plain", []), ("rewritten", ["--rewrite-model", str(tiny_model)])):
        result = run_script(
            "data_prep/build_benchmark.py",
            "--kg",
            kg,
            "--ratings",
            ratings,
            "--users",
            users,
            "--out",
            tmp_path / name,
            *extra,
        )
        assert ("rewriting:" in result.stderr) == bool(extra)  # the model really generated a rewrite per query
        outputs[name] = json.loads((tmp_path / name / "dataset/movie/ExplicitQuery.json").read_text())
    assert outputs["plain"]  # same seed, same records: the random model's rewrites all lost a name
    assert outputs["rewritten"] == outputs["plain"]


def test_year_queries_neither_leak_nor_contradict_the_year():
    """Implicit Year queries must not print the hidden year (in a referenced title's "(1995)"), misinformed
    ones must not state the true year beside the false one, and a title two films share is never a Year
    reference (without its year it would be ambiguous)."""
    films = [(str(n), title, year, genre) for n, (title, year, genre) in enumerate([
        ("Heat", 1995, "Crime"), ("Casino", 1995, "Crime"), ("Se7en", 1995, "Crime"), ("Hamlet", 1996, "Drama"),
        ("Hamlet", 1948, "Drama"), ("Fargo", 1996, "Crime"), ("Scream", 1996, "Horror"), ("Twister", 1996, "Drama"),
        ("Usual Suspects, The", 1995, "Crime"), ("Evita", 1996, "Drama"), ("Vertigo", 1958, "Drama"),
    ])]  # fmt: skip
    items = [CatalogItem(i, f"{t} ({y})", {"Year": [str(y)], "Genre": [g]}) for i, t, y, g in films]
    ids = [i for i, *_ in films]
    histories = {user: ids[shift:] + ids[:shift] for shift, user in enumerate("abcdefgh")}
    builder = BenchmarkBuilder(items, BuildSettings(seed=1, queries_per_user=4, anchor_relations=("Year",)))
    records = builder.condition_queries(histories)
    assert records["implicit"] and records["misinformed"]
    for record in records["implicit"]:
        (hint,) = record["multihop_info"]
        assert hint["relation"] == "Year" and not hint["movie"].startswith("Hamlet")
        for key in ("direct_description_query", "situational_description_query"):
            assert hint["person"] not in record[key]  # the hidden year appears nowhere
        assert "release year of " in record["direct_description_query"]
    for record in records["misinformed"]:
        (claim,) = record["misinformed"]
        assert not claim["movie"].startswith("Hamlet")
        assert claim["original person"] not in record["query"] and claim["person"] in record["query"]
    # natural titles: "The Usual Suspects (1995)", never the catalog's "Usual Suspects, The"
    texts = json.dumps(records)
    assert "Usual Suspects, The" not in texts
    counts = builder.explain_counts(records)
    assert counts["by_task"]["implicit"]["kept"] == len(records["implicit"])
