"""Grounded RecBench+ prompts (--candidates N): rows, prompts, stats, the evaluation's prompts, the reward."""

import json
import shutil

import pytest
from conftest import RELEASE, read_view, run_script

from rectune.benchmarks import Resources, get_benchmark, load_rows
from rectune.benchmarks.recbench.grounding import retriever_recall
from rectune.benchmarks.recbench.rewards import from_candidates
from rectune.data.catalog import KnowledgeGraph
from rectune.data.prompt_options import prompt_variant
from rectune.data.titles import CatalogItem, TitleMatcher

# An independent KG for the fixture's films (true facts), in the --kg file format; the release's own
# KG, rebuilt from the queries' ground truth, is never shown to the retriever.
DIRECTORS = {
    "1": "Michael Mann", "2": "John Frankenheimer", "3": "Bryan Singer", "4": "Wolfgang Petersen",
    "5": "Francis Ford Coppola", "6": "Francis Ford Coppola", "7": "Martin Scorsese", "8": "Martin Scorsese",
    "9": "Jean-Pierre Jeunet", "10": "Alfred Hitchcock", "11": "Gus Van Sant", "12": "John Lasseter",
    "13": "Martin Scorsese", "14": "Martin Scorsese",
}  # fmt: skip
DE_NIRO = ("1", "2", "7", "8", "13", "14")


def write_kg(path):
    facts = [{"item_id": i, "relation": "Director", "value": name} for i, name in DIRECTORS.items()]
    facts += [{"item_id": i, "relation": "Starring", "value": "Robert De Niro"} for i in DE_NIRO]
    path.write_text("".join(json.dumps(fact) + "\n" for fact in facts))
    return path


def prepare(out, *extra, src=RELEASE):
    kg = write_kg(out.parent / f"{out.name}-kg.jsonl")
    run_script(
        "data_prep/recbench.py", "--src", src, "--domain", "movie", "--out", out, "--test-size", "0.0",
        "--kg", kg, *extra,
    )  # fmt: skip
    return {row.id: row for row in load_rows(out / "train.jsonl")}


def titles(row):
    return [candidate["title"] for candidate in row.candidates]


def test_rows_carry_candidates_sorted_by_title_and_stats_record_recall(tmp_path):
    rows = prepare(tmp_path, "--candidates", "3")
    # "Any Martin Scorsese films": Taxi Driver, GoodFellas, Casino and Raging Bull match the same two
    # words; Taxi Driver's document is the longest (13 words, two genres), so it scores lowest.
    # Ground truth Taxi Driver, GoodFellas, Casino: 2 of 3 shown.
    assert titles(rows["movie/explicit/1"]) == ["Casino (1995)", "GoodFellas (1990)", "Raging Bull (1980)"]
    assert rows["movie/explicit/1"].ground_truth_ids == ["7", "8", "13"]
    # "a tense thriller with Robert De Niro": Heat, Ronin, Taxi Driver (13 words) and Casino (12) match
    # thriller, robert, de, niro; Casino first, then Heat and Ronin by catalog order. Shown alphabetically,
    # so the ground truth (Heat, Ronin) is not first.
    assert titles(rows["movie/explicit/0"]) == ["Casino (1995)", "Heat (1995)", "Ronin (1998)"]
    # each keeps its place in the retriever's order: baseline:bm25 reads its top K from it
    assert [c["rank"] for c in rows["movie/explicit/0"].candidates] == [1, 2, 3]
    # explicit/1: GoodFellas, Casino and Raging Bull tie (12 words each): catalog order, ids 8, 13, 14
    assert [c["rank"] for c in rows["movie/explicit/1"].candidates] == [2, 1, 3]
    for row in rows.values():
        assert titles(row) == sorted(titles(row), key=str.casefold)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["prompt"] == {
        "with_history": False, "k": None, "candidates": 3, "candidate_facts": False, "candidate_order": "title",
    }  # fmt: skip
    recall = stats["retriever"]["recall_at_n"]["train"]
    # explicit/0: 2 of 2; explicit/1: 2 of 3; explicit/2 ("a gritty Scorsese drama starring Robert De
    # Niro", truth Taxi Driver and Raging Bull): the 12-word GoodFellas, Casino, Raging Bull win, 1 of 2
    assert recall["explicit"] == pytest.approx((1 + 2 / 3 + 1 / 2) / 3, abs=1e-4)
    assert recall == retriever_recall(list(rows.values()))
    assert stats["retriever"]["recall_at_n"]["test"] == {"all": None}  # no test split asked for


def test_retriever_never_reads_the_ground_truth(tmp_path):
    release = tmp_path / "release"
    shutil.copytree(RELEASE, release)
    queries = release / "data" / "movie" / "ExplicitQuery.json"
    records = json.loads(queries.read_text())
    records[0]["movieSubset"], records[0]["movieSubsetId"] = ["Toy Story (1995)"], [12]
    records[0]["sharedRelationships"] = [["Genre", "Animation"]]
    queries.write_text(json.dumps(records))
    original = prepare(tmp_path / "original", "--candidates", "3")
    edited = prepare(tmp_path / "edited", "--candidates", "3", src=release)
    assert edited["movie/explicit/0"].ground_truth_ids == ["12"]
    assert {i: r.candidates for i, r in edited.items()} == {i: r.candidates for i, r in original.items()}


def test_grounded_prompt_text_and_targets(tmp_path):
    prepare(tmp_path, "--candidates", "3", "--candidate-facts")
    rft = {r["id"]: r for r in read_view(tmp_path / "train_rft.jsonl")}
    example = rft["movie/explicit/0"]
    assert example["prompt"][0]["content"] == (
        "You are a movie recommender system. You are given a list of candidate movies and a query from the user. "
        "You need to recommend movies from the candidates that satisfy the user's query. Please output the "
        "recommended movies directly, do not output other content."
    )
    assert example["prompt"][1]["content"] == (
        "Candidate movies:\n"
        "- Casino (1995): director: martin scorsese; starring: robert de niro\n"
        "- Heat (1995): director: michael mann; starring: robert de niro\n"
        "- Ronin (1998): director: john frankenheimer; starring: robert de niro\n"
        "Query: I'm in the mood for a tense thriller with Robert De Niro in it.\n"
        "Recommended movies (separated by [SEP]):"
    )
    assert example["candidate_ids"] == ["13", "1", "2"]
    sft = {r["messages"][1]["content"]: r["messages"][2]["content"] for r in read_view(tmp_path / "train_sft.jsonl")}
    assert sft[example["prompt"][1]["content"]] == "Heat (1995) [SEP] Ronin (1998)"  # the target is the truth


def test_retriever_order_and_targets_of_exactly_k(tmp_path):
    rows = prepare(tmp_path, "--candidates", "3", "--candidate-order", "retriever", "--k", "2")
    # the retriever's order, best first (explicit/1: the tie of three 12-word documents in catalog order)
    assert titles(rows["movie/explicit/0"]) == ["Casino (1995)", "Heat (1995)", "Ronin (1998)"]
    assert titles(rows["movie/explicit/1"]) == ["GoodFellas (1990)", "Casino (1995)", "Raging Bull (1980)"]
    assert [c["rank"] for c in rows["movie/explicit/1"].candidates] == [1, 2, 3]
    rft = {r["id"]: r for r in read_view(tmp_path / "train_rft.jsonl")}
    prompt = rft["movie/explicit/1"]["prompt"][1]["content"]
    assert prompt.startswith("Candidate movies:\n- GoodFellas (1990)\n- Casino (1995)\n- Raging Bull (1980)\n")
    assert "Please output 2 recommended movies" in rft["movie/explicit/1"]["prompt"][0]["content"]
    sft = {r["messages"][1]["content"]: r["messages"][2]["content"] for r in read_view(tmp_path / "train_sft.jsonl")}
    targets = {row_id: sft[r["prompt"][1]["content"]] for row_id, r in rft.items()}
    # explicit/0: truth Heat (rank 2) and Ronin (rank 3) shown, so both, in the retriever's order
    assert targets["movie/explicit/0"] == "Heat (1995) [SEP] Ronin (1998)"
    # explicit/1: truth Taxi Driver (not shown), GoodFellas (1), Casino (2): the two shown ones, rank order
    assert targets["movie/explicit/1"] == "GoodFellas (1990) [SEP] Casino (1995)"
    # explicit/2: truth Taxi Driver and Raging Bull; only Raging Bull (rank 3) shown: it, then the retriever's
    # best other candidate fills the second slot
    explicit_2 = rows["movie/explicit/2"]
    best_other = min((c for c in explicit_2.candidates if c["id"] not in explicit_2.ground_truth_ids),
                     key=lambda c: c["rank"])  # fmt: skip
    assert targets["movie/explicit/2"] == f"Raging Bull (1980) [SEP] {best_other['title']}"
    assert best_other["rank"] == 1
    for target in targets.values():
        assert target.count("[SEP]") == 1  # exactly K = 2 titles


def test_closed_book_targets_at_k_keep_the_first_k_titles():
    benchmark = get_benchmark("recbench+")
    truth = ["Heat (1995)", "Usual Suspects, The (1995)", "Alien (1979)"]
    row = benchmark.row_type.from_dict(
        {"id": "q", "domain": "movie", "task": "explicit", "query": "x", "ground_truth": truth}
    )
    assert benchmark.answer(row, {"k": 2}) == "Heat (1995) [SEP] The Usual Suspects (1995)"
    assert benchmark.answer(row, {}) == "Heat (1995) [SEP] The Usual Suspects (1995) [SEP] Alien (1979)"


def test_evaluation_prompts_follow_the_prepared_variant(tmp_path):
    rows = prepare(tmp_path, "--candidates", "2")
    variant = prompt_variant(tmp_path / "train.jsonl", None, None)
    assert variant["candidates"] == 2
    messages = get_benchmark("recbench+").messages(rows["movie/implicit/0"], variant)
    assert messages[1]["content"].startswith("Candidate movies:\n- ")
    closed = get_benchmark("recbench+").messages(rows["movie/implicit/0"], {})
    assert closed[1]["content"].startswith("Query: ")  # the rows keep the closed-book prompt too


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--candidates", "0"], "--candidates 0: give a number of candidates of at least 1"),
        (["--candidate-facts"], "--candidate-facts shows the candidates' KG facts: give --candidates N too"),
        (["--candidate-order", "retriever"], "--candidate-order orders the candidates: give --candidates N too"),
    ],
)
def test_bad_candidate_flags(tmp_path, flags, message):
    result = run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", tmp_path / "out", *flags,
        check=False,
    )  # fmt: skip
    assert result.returncode != 0 and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_from_candidates_reward_by_hand():
    matcher = TitleMatcher(
        [CatalogItem("1", "Heat (1995)"), CatalogItem("2", "Alien (1979)"), CatalogItem("3", "Jaws (1975)")]
    )
    resources = Resources.loaded(matcher, KnowledgeGraph())
    labels = {"ground_truth": [["Heat (1995)"]] * 4, "ground_truth_ids": [["1"]] * 4, "task": ["explicit"] * 4}
    values = from_candidates(
        ["Heat [SEP] Jaws", "", "Heat [SEP] Alien [SEP] Invented Film", "Heat"],
        conditions=[[]] * 4,
        candidate_ids=[["1", "2"], ["1", "2"], ["1", "2"], []],
        resources=resources,
        **labels,
    )
    # 1 of 2 chosen from the list; nothing named; 2 of 3 (an unresolved title is not a candidate); no candidates
    assert values == [pytest.approx(0.5), 0.0, pytest.approx(2 / 3), None]
    closed_book = from_candidates(
        ["Heat"], conditions=[[]], resources=resources, **{k: v[:1] for k, v in labels.items()}
    )
    assert closed_book == [None]  # data prepared without --candidates: the column is absent
