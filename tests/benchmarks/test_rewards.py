"""Each reward on hand-written completions; expected values computed by hand."""

import json
import math

import pytest
from conftest import RELEASE, run_script

from rectune.benchmarks import Resources, get_benchmark
from rectune.benchmarks.recbench.rewards import REWARDS
from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.core.io import RecTuneError
from rectune.data.catalog import KnowledgeGraph
from rectune.data.completions import completion_text
from rectune.data.titles import CatalogItem, TitleMatcher
from rectune.training.rewards import resolve_rewards, rft_rewards

MATCHER = TitleMatcher(
    [CatalogItem("1", "Heat (1995)"), CatalogItem("2", "Ronin (1998)"), CatalogItem("13", "Casino (1995)")]
)
KG = KnowledgeGraph([("1", "genre", "Thriller"), ("2", "genre", "Thriller"), ("13", "genre", "Drama")])
LABELS = {
    "ground_truth": [["Heat (1995)", "Ronin (1998)"]],
    "ground_truth_ids": [["1", "2"]],
    "conditions": [[["Genre", "Thriller"]]],
}

COMPLETIONS = {
    # text: (recall, precision, f1, cmr, format, hallucination)
    "Heat (1995)\nCasino (1995)\nInvented Film": (1 / 2, 1 / 3, 0.4, 1 / 3, 0.5, -1 / 3),  # no [SEP]: 0.5
    "Heat (1995) [SEP] Casino (1995) [SEP] Invented Film": (1 / 2, 1 / 3, 0.4, 1 / 3, 1.0, -1 / 3),
    "Heat\nRonin": (1.0, 1.0, 1.0, 1.0, 0.5, 0.0),
    "Heat [SEP] Ronin [SEP] ": (1.0, 1.0, 1.0, 1.0, 1.0, 0.0),  # a trailing separator is still clean
    "'Heat'[SEP]\"Ronin (1998)\"": (1.0, 1.0, 1.0, 1.0, 1.0, 0.0),  # quotes, no spaces
    "Heat [SEP] Here are more films you will like: Ronin": (1.0, 1.0, 1.0, 1.0, 1.0, 0.0),  # intro dropped
    "Heat [SEP] Ronin\nThese films all feature great heists.": (1.0, 1.0, 1.0, 1.0, 0.5, 0.0),  # prose after
    "Sure! Here you go:\nHeat": (1 / 2, 1.0, 2 / 3, 1.0, 0.5, 0.0),
    "": (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "@@##!!": (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    "Heat " * 20_000: (0.0, 0.0, 0.0, 0.0, 0.0, 0.0),  # one huge prose-like line: not a title
}


def rewards_for(text, task="explicit"):
    funcs, _ = resolve_rewards(get_benchmark("recbench+"), list(REWARDS), Resources.loaded(MATCHER, KG))
    completion = [{"role": "assistant", "content": text}]  # TRL's conversational form
    return {f.__name__: f([completion], task=[task], **LABELS)[0] for f in funcs}


@pytest.mark.parametrize("text", list(COMPLETIONS))
def test_rewards_on_hand_written_completions(text):
    values = rewards_for(text)
    expected = dict(
        zip(["recall", "precision", "f1", "cmr", "format", "hallucination"], COMPLETIONS[text], strict=True)
    )
    for name, value in expected.items():
        assert values[name] == pytest.approx(value), name
    assert values["misinformed"] is None  # only applies to misinformed queries


def test_misinformed_rule():
    assert rewards_for("", task="misinformed")["misinformed"] == 1.0  # refusal
    assert rewards_for("Heat", task="misinformed")["misinformed"] == 1.0  # corrected premise: a true item
    assert rewards_for("Casino\nInvented Film", task="misinformed")["misinformed"] == 0.0  # followed the false fact


def test_profile_tasks_have_no_cmr():
    assert rewards_for("Heat", task="interest")["cmr"] is None


def test_rewards_never_raise_on_odd_completions():
    funcs, _ = resolve_rewards(get_benchmark("recbench+"), list(REWARDS), Resources.loaded(MATCHER, KG))
    odd = [None, 42, [], [{"role": "assistant"}], [{"content": None}], "\x00\ufffd", {"content": "Heat"}]
    for func in funcs:
        values = func(
            odd,
            task=["explicit"] * len(odd),
            ground_truth=[["Heat"]] * len(odd),
            ground_truth_ids=[["1"]] * len(odd),
            conditions=[[]] * len(odd),
        )
        assert len(values) == len(odd)
    assert completion_text({"content": "Heat"}) == "Heat"


def test_unknown_reward_name():
    with pytest.raises(RecTuneError, match="unknown recbench\\+ reward 'recal'"):
        resolve_rewards(get_benchmark("recbench+"), ["recal"], Resources.loaded(MATCHER, KG))


def test_a_reward_given_twice_is_one_line():
    """TRL summed it twice and logged both under one name: weighted double, without a word."""
    with pytest.raises(RecTuneError) as caught:
        resolve_rewards(get_benchmark("recbench+"), ["recall", "format", "recall"], Resources.loaded(MATCHER, KG))
    assert str(caught.value) == "reward_funcs: 'recall' is given twice; weigh a reward with reward_weights instead"


def test_conditions_met_gives_partial_credit_from_the_kg():
    kg = KnowledgeGraph(
        [("1", "genre", "Thriller"), ("1", "director", "Michael Mann"), ("2", "genre", "Thriller"),
         ("13", "director", "Michael Mann")]
    )  # fmt: skip
    funcs, _ = resolve_rewards(get_benchmark("recbench+"), ["conditions_met"], Resources.loaded(MATCHER, kg))
    labels = {**LABELS, "conditions": [[["Genre", "Thriller"], ["Director", "Michael Mann"]]]}

    def reward(text, task="explicit"):
        return funcs[0]([text], task=[task], **labels)[0]

    # Heat meets 2 of 2, Ronin 1 of 2, Casino 1 of 2, an invented title 0: means over recommended items
    assert reward("Heat\nRonin") == pytest.approx((2 / 2 + 1 / 2) / 2)
    assert reward("Casino\nInvented Film") == pytest.approx((1 / 2 + 0) / 2)
    assert reward("Heat") == 1.0
    assert reward("") == 0.0
    assert reward("Heat", task="interest") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Heat (1995) [SEP] Heat (1995) [SEP] Heat (1995) [SEP] Ronin (1998)", -2 / 4),  # 4 named, 2 distinct
        ("The Godfather Part II (1974) [SEP] The Godfather Part II (1974) [SEP] Heat (1995)", -1 / 3),  # unresolved too
        ("Heat (1995) [SEP] Ronin (1998)", 0.0),
        ("", 0.0),
    ],
)
def test_repetition_charges_titles_named_twice(text, expected):
    assert rewards_for(text)["repetition"] == pytest.approx(expected)


def at_k(text, k=2, candidate_ids=None):
    """The fixed-K rewards of one completion at ``k`` (truth Heat and Ronin; Casino is no hit)."""
    resources = Resources.loaded(MATCHER, KG)
    resources.top_k = k
    completion = [{"role": "assistant", "content": text}]
    extra = {"candidate_ids": [candidate_ids]} if candidate_ids is not None else {}
    names = ("ndcg_at_k", "precision_at_k", "length_at_k")
    return tuple(REWARDS[n]([completion], task=["explicit"], resources=resources, **LABELS, **extra)[0] for n in names)


IDEAL_2 = 1 + 1 / math.log2(3)  # two true items in the first two slots


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Heat (1995) [SEP] Ronin (1998)", (1.0, 1.0, 0.0)),
        ("Heat (1995) [SEP] Casino (1995)", (1 / IDEAL_2, 0.5, 0.0)),
        ("Casino (1995) [SEP] Heat (1995)", ((1 / math.log2(3)) / IDEAL_2, 0.5, 0.0)),
        # naming more: the third title is outside K and the answer is one title too long
        ("Heat (1995) [SEP] Ronin (1998) [SEP] Casino (1995)", (1.0, 1.0, -0.5)),
        # padding cannot help: the hits come after the first K slots
        ("Casino (1995) [SEP] Invented Film [SEP] Heat (1995) [SEP] Ronin (1998)", (0.0, 0.0, -1.0)),
        # a repeat takes its slot and earns nothing
        ("Heat (1995) [SEP] Heat (1995) [SEP] Ronin (1998)", (1 / IDEAL_2, 0.5, -0.5)),
        ("", (0.0, 0.0, -1.0)),
    ],
)
def test_rewards_at_k_cannot_be_padded(text, expected):
    assert at_k(text) == pytest.approx(expected)


def test_rewards_at_k_count_only_items_from_the_candidate_list():
    # Heat is a true item but was not among the candidates shown: its slot earns nothing
    ndcg, precision, length = at_k("Heat (1995) [SEP] Ronin (1998)", candidate_ids=["2", "13"])
    assert (ndcg, precision, length) == pytest.approx(((1 / math.log2(3)) / IDEAL_2, 0.5, 0.0))
    # K from the prompt: at 3, two hits of three slots, one title short
    assert at_k("Heat (1995) [SEP] Ronin (1998)", k=3) == pytest.approx((1.0, 2 / 3, -1 / 3))


def beyond_head(text, ranks, k=2):
    """The beyond_head reward of one completion (truth Heat and Ronin) with candidates Casino, Heat, Ronin."""
    resources = Resources.loaded(MATCHER, KG)
    resources.top_k = k
    completion = [{"role": "assistant", "content": text}]
    labels = {**LABELS, "candidate_ids": [["13", "1", "2"]], "candidate_ranks": [ranks]}
    return REWARDS["beyond_head"]([completion], task=["explicit"], resources=resources, **labels)[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ronin (1998) [SEP] Heat (1995)", 1 / 2),  # Ronin (rank 3) is true and outside the head of 2
        ("Heat (1995) [SEP] Casino (1995)", 0.0),  # the head's true item, then its wrong one: a copy earns nothing
        ("Casino (1995) [SEP] Heat (1995)", 0.0),
        ("Ronin (1998) [SEP] Ronin (1998)", 1 / 2),  # a repeat earns nothing in its slot
        ("Casino (1995) [SEP] Heat (1995) [SEP] Ronin (1998)", 0.0),  # Ronin comes after the first K slots
        ("", 0.0),
    ],
)
def test_beyond_head_pays_only_for_true_items_the_retrievers_top_k_lacks(text, expected):
    assert beyond_head(text, [1, 2, 3]) == pytest.approx(expected)


def test_beyond_head_reads_the_retrievers_ranks_not_the_listed_order():
    # the same list, the retriever ranking Ronin 1, Heat 2, Casino 3: both true items are its top 2
    assert beyond_head("Ronin (1998) [SEP] Heat (1995)", [3, 2, 1]) == 0.0
    # ranking Casino 1, Ronin 2, Heat 3, at K 1: Heat departs from the head (Casino) and is true
    assert beyond_head("Heat (1995) [SEP] Casino (1995)", [1, 3, 2], k=1) == pytest.approx(1.0)
    assert beyond_head("Heat (1995)", None) is None  # no ranks: no head to depart from
    assert rewards_for("Heat (1995)")["beyond_head"] is None  # closed book


def test_grounded_labels_carry_the_retrievers_ranks(tmp_path):
    data = tmp_path / "data"
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", data, "--candidates", "3")
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    labels = get_benchmark("recbench+").labels([RecBenchRow.from_dict(row) for row in rows])
    for row, label in zip(rows, labels, strict=True):
        assert label["candidate_ids"] == [c["id"] for c in row["candidates"]]
        assert label["candidate_ranks"] == [c["rank"] for c in row["candidates"]]
        assert sorted(label["candidate_ranks"]) == list(range(1, len(row["candidates"]) + 1))


def test_labels_carry_ranks_only_when_every_candidate_has_one():
    row = {"id": "q", "domain": "movie", "task": "explicit", "query": "q", "ground_truth": ["Heat (1995)"]}
    ranked = [{"id": "13", "title": "Casino (1995)", "rank": 2}, {"id": "1", "title": "Heat (1995)", "rank": 1}]
    unranked = [ranked[0], {"id": "1", "title": "Heat (1995)"}]  # one rank missing: no head to depart from
    labels = get_benchmark("recbench+").labels(
        [RecBenchRow.from_dict({**row, "candidates": candidates}) for candidates in (ranked, unranked)]
    )
    assert labels[0]["candidate_ranks"] == [2, 1]  # in the listed order, beside candidate_ids
    assert "candidate_ranks" not in labels[1]
    assert labels[1]["candidate_ids"] == ["13", "1"]


def test_training_rewards_take_k_from_the_prompt_data_prep_built(tmp_path):
    data = tmp_path / "data"
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", data, "--k", "2")
    funcs, names = rft_rewards(["ndcg_at_k", "length_at_k"], data / "train_rft.jsonl")
    assert names == ["ndcg_at_k", "length_at_k"] and {f.keywords["resources"].top_k for f in funcs} == {2}
