"""Row audits: each builder run on a MovieLens release in every layout, every row it writes read as a
person would read it. Titles are natural (``The Silent Harbor (1947)``, no ``Harbor, The``, no
alternate titles, no ``[movie N]``), no title shows twice in one history, implicit queries hide their
value, misinformed claims are false and not contradicted, profiles read well, counts add up."""

import json
import re

import pytest
from conftest import ROOT, read_jsonl, read_view, run_script

from perf.movielens_world import ALTERNATES, LAYOUTS, synthetic, write
from rectune.benchmarks import get_benchmark, load_rows
from rectune.data.ratings import read_items

# how the catalog spells what a person would not write: "Harbor, The (1995)", "[movie 12]", alternates
CATALOG_SPELLING = re.compile(r", (?:The|A|An) \(\d{4}\)|\[movie \d+\]|" + "|".join(map(re.escape, ALTERNATES)))


def world_for(layout: str):
    half_stars = layout in ("ml-10m", "ml-latest")  # ml-100k and ML-1M have whole stars only
    tagged = 0.5 if layout in ("ml-10m", "ml-latest") else 0.0  # the releases with tags files
    return synthetic(90, 320, 7200, half_stars=half_stars, tagged=tagged, seed=11)


@pytest.fixture(scope="module", params=LAYOUTS)
def release(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    return request.param, write(folder / "ml", request.param, world_for(request.param)), folder


def texts_of(path) -> list[str]:
    """Every message (prompt and target) of an SFT or RFT file."""
    found = []
    for row in read_view(path):
        for message in row.get("messages", row.get("prompt", [])):
            found.append(message["content"])
    return found


def assert_reads_naturally(text: str, where: str) -> None:
    match = CATALOG_SPELLING.search(text)
    assert match is None, f"{where}: catalog spelling {match.group(0)!r} in {text[:300]!r}"


def test_recbench_release_rows(release):
    layout, folder, tmp = release
    out, prepared = tmp / "release", tmp / "prepared"
    run_script("data_prep/build_benchmark.py", "--movielens", folder, "--out", out)
    movie = out / "dataset" / "movie"
    records = {
        task: json.loads((movie / name).read_text())
        for task, name in [("explicit", "ExplicitQuery.json"), ("implicit", "ImplicitQuery.json"),
                           ("misinformed", "MisinformedQuery.json"), ("interest", "InterestBasedQuery.json")]
    }  # fmt: skip
    assert records["explicit"] and records["implicit"] and records["misinformed"], layout
    kg: dict[str, dict[str, set]] = {}
    for triple in read_jsonl(out / "kg.jsonl"):
        kg.setdefault(triple["item_id"], {}).setdefault(triple["relation"], set()).add(triple["value"])
    items = read_items(folder)
    by_name = {item.name: item.id for item in items.values()}

    for record in records["explicit"]:
        for _, value in record["sharedRelationships"]:
            assert value.casefold() in record["situational_description_query"].casefold()
    for record in records["implicit"]:
        (hint,) = record["multihop_info"]
        for key in ("direct_description_query", "situational_description_query"):
            assert hint["person"].casefold() not in record[key].casefold(), record  # the value stays hidden
        reference = by_name[hint["movie"]]
        assert hint["person"] in kg[reference][hint["relation"]]
        assert int(reference) not in record["movieSubsetId"]
    for record in records["misinformed"]:
        (claim,) = record["misinformed"]
        subject = by_name[claim["movie"]]
        assert claim["person"] not in kg[subject][claim["relation"]]  # false about the item
        assert claim["original person"] in kg[subject][claim["relation"]]
        assert claim["original person"].casefold() not in record["query"].casefold()  # not contradicted
        others = [
            v for r, v in record["sharedRelationships"] if [r, v] != [claim["relation"], claim["original person"]]
        ]
        assert claim["person"] not in others
    for task, task_records in records.items():
        for record in task_records:
            for text in _record_texts(record):
                assert_reads_naturally(text, f"{layout} {task}")
            for entry in record.get("query & ground true", []):
                assert entry["movie subset"]

    stats = json.loads((out / "stats.json").read_text())
    counts = stats["condition_queries"]
    for task in ("explicit", "implicit", "misinformed"):
        per = counts["by_task"][task]
        assert per["kept"] == len(records[task]) == stats["queries"][task]
        assert per["assigned"] == per["kept"] + per["dropped_without_a_sound_reference"]
    drawn = sum(per["assigned"] for per in counts["by_task"].values())
    assert drawn + counts["not_drawn_beyond_queries_per_user"] + counts["removed_as_used_for_another_user"] == (
        counts["candidate_condition_sets"] - counts["removed_by_ground_truth_cap"]
    )
    assert stats["merged_duplicate_items"] == 0 if len(items) < 400 else stats["merged_duplicate_items"] > 0

    run_script("data_prep/recbench.py", "--src", out, "--domain", "movie", "--kg", out / "kg.jsonl",
               "--with-history", "--out", prepared)  # fmt: skip
    for name in ("train_sft.jsonl", "train_rft.jsonl"):
        for text in texts_of(prepared / name):
            # the history is the authors' (MovieLens spelling, as in their requests): only query and answer here
            query_part = text.split("\nQuery: ", 1)[-1]
            assert "[movie" not in text
            assert_reads_naturally(query_part, f"{layout} recbench {name}")
    rows = load_rows(prepared / "train.jsonl") if (prepared / "train.jsonl").exists() else []
    rows += load_rows(prepared / "test.jsonl")
    for row in rows:
        assert len(row.history) == len(set(row.history)), row.id
        assert_reads_naturally(row.query + " ".join(row.ground_truth), row.id)


def _record_texts(record: dict) -> list[str]:
    texts = [record.get(k, "") for k in ("direct_description_query", "situational_description_query", "query")]
    texts += record.get("movieSubset", [])
    texts += record.get("Shared consecutive movies", [])
    for entry in record.get("query & ground true", []):
        texts += [entry["query"], *entry["movie subset"]]
    return [t for t in texts if t]


def test_perrecbench_rows(release):
    layout, folder, tmp = release
    out = tmp / "perrec"
    run_script("data_prep/perrecbench.py", "--reviews", folder, "--domain", "movies", "--min-history", "10",
               "--out", out)  # fmt: skip
    benchmark = get_benchmark("perrecbench")
    rows = load_rows(out / "test.jsonl")
    assert rows, layout
    without = 0
    for row in rows:
        text = "\n".join(m["content"] for m in benchmark.messages(row, {}))
        assert_reads_naturally(text, row.id)
        assert "0.5-5" not in text and "1-5 scale" not in text
        for user in row.users:
            titles = [h["title"] for h in user["history"]]
            assert len(titles) == len(set(titles)), row.id
            profile = user["profile"] or ""
            assert not re.search(r"\b1 items\b", profile), profile
            if not titles:
                assert profile == "No earlier ratings.", row.id
            liked = re.search(r"Rated highest: (.*?)\. Rated lowest: (.*)\.$", profile)
            if liked:
                assert not set(liked.group(1).split("; ")) & set(liked.group(2).split("; ")), profile
        if row.task == "listwise" and not row.id.endswith("/reversed"):  # each group's members once
            without += sum(u["profile"] == "No earlier ratings." for u in row.users)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["test"]["members_without_earlier_ratings"] == without
    for task in ("pointwise", "pairwise", "listwise"):
        for text in texts_of(out / f"train_sft_{task}.jsonl"):
            assert_reads_naturally(text, f"{layout} perrec {task}")


def test_llmrec_rows(release):
    layout, folder, tmp = release
    out = tmp / "llmrec"
    run_script("data_prep/llmrec.py", "--reviews", folder, "--domain", "movies", "--out", out)
    benchmark = get_benchmark("llmrec")
    for row in load_rows(out / "test.jsonl"):
        text = "\n".join(m["content"] for m in benchmark.messages(row, {}))
        assert_reads_naturally(text + row.target, row.id)
        titles = [h["title"] for h in row.history]
        assert len(titles) == len(set(titles)), row.id
    for task in ("rating", "sequential", "direct"):
        for text in texts_of(out / f"train_sft_{task}.jsonl"):
            assert_reads_naturally(text, f"{layout} llmrec {task}")


README_START, README_END = "<!-- movielens-examples -->", "<!-- /movielens-examples -->"


def example_rows(prepared) -> str:
    """The first test row of each RecBench+ query type, trimmed to what a reader needs, as README shows them."""
    rows = {}
    for row in load_rows(prepared / "test.jsonl"):
        rows.setdefault(row.task, row)
    lines = []
    for task in ("explicit", "implicit", "misinformed", "interest", "demographics"):
        row = rows[task].to_dict()
        shown = {k: row[k] for k in ("id", "query", "conditions", "multihop", "misinformation") if row.get(k)}
        shown["ground_truth"] = row["ground_truth"][:3] + (["..."] if len(row["ground_truth"]) > 3 else [])
        lines.append(json.dumps(shown, ensure_ascii=False))
    return "\n".join(lines)


def test_readme_shows_rows_built_from_the_fixture_release(tmp_path):
    """The docs' MovieLens examples are this build's rows (an ML-1M-layout release of the audit's world)."""
    folder = write(tmp_path / "ml", "ml-1m", world_for("ml-1m"))
    run_script("data_prep/build_benchmark.py", "--movielens", folder, "--out", tmp_path / "release")
    run_script("data_prep/recbench.py", "--src", tmp_path / "release", "--domain", "movie", "--kg",
               tmp_path / "release" / "kg.jsonl", "--test-size", "1.0", "--out", tmp_path / "prepared")  # fmt: skip
    readme = (ROOT / "docs" / "movielens-amazon.md").read_text()
    shown = readme.split(README_START)[1].split(README_END)[0].strip().removeprefix("```json").removesuffix("```")
    expected = example_rows(tmp_path / "prepared")
    assert shown.strip() == expected, f"docs/movielens-amazon.md's examples should read:\n{expected}"
