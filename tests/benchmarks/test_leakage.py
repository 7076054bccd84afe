"""No held-out answer reaches training, checked on what the data_prep scripts write with a real split."""

import json

from conftest import RELEASE, ROOT, read_jsonl, read_view, run_script

FIXTURES = ROOT / "tests" / "fixtures"


def user_text(example: dict) -> str:
    messages = example["messages"] if "messages" in example else example["prompt"]
    return "\n".join(m["content"] for m in messages if m["role"] != "assistant")


def test_recbench_test_queries_are_not_training_prompts(tmp_path):
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", tmp_path, "--test-size", "0.5")
    test = read_jsonl(tmp_path / "test.jsonl")
    train_prompts = [user_text(e) for e in read_view(tmp_path / "train_sft.jsonl")]
    rft_prompts = [user_text(e) for e in read_view(tmp_path / "train_rft.jsonl")]
    assert test and train_prompts and len(train_prompts) == len(rft_prompts)
    for row in test:
        query = row["query"].strip().casefold()
        assert not any(query in prompt.casefold() for prompt in train_prompts + rft_prompts), row["id"]


def test_perrec_test_items_are_never_trained_on(tmp_path):
    """Three users rate two films a week apart with opposite tastes: one group per film, split by film.

    A training prompt may show neither the held-out film as the shared item nor, in a user's
    history, that user's rating of it (which is the answer the test asks for).
    """
    ratings = {"u1": (5, 1, 3, 3), "u2": (3, 3, 3, 3), "u3": (1, 5, 3, 3)}  # relative ±2 on films 10 and 20
    lines = [
        f"{user}::{item}::{rating}::{1_000_000_000 + 3600 * (u * 4 + i)}"
        for u, (user, row) in enumerate(ratings.items())
        for i, (item, rating) in enumerate(zip((10, 20, 30, 40), row, strict=True))
    ]
    (tmp_path / "ratings.dat").write_text("\n".join(lines) + "\n")
    titles = ("Alpha Film (1990)", "Beta Film (1991)", "Gamma Film (1992)", "Delta Film (1993)")
    (tmp_path / "movies.dat").write_text(
        "".join(f"{item}::{title}::Drama\n" for item, title in zip((10, 20, 30, 40), titles, strict=True))
    )
    out = tmp_path / "out"
    run_script(
        "data_prep/perrecbench.py", "--reviews", tmp_path / "ratings.dat", "--items", tmp_path / "movies.dat",
        "--domain", "movies", "--min-history", "2", "--k", "3", "--test-size", "0.5", "--out", out,
    )  # fmt: skip
    test_titles = {row["item"]["title"] for row in read_jsonl(out / "test.jsonl")}
    train = [row for kind in ("sft", "rft") for task in ("pointwise", "pairwise", "listwise")
             for row in read_view(out / f"train_{kind}_{task}.jsonl")]  # fmt: skip
    assert len(test_titles) == 1 and train  # the split really split: one film on each side
    for example in train:
        assert not any(title in user_text(example) for title in test_titles), user_text(example)


def test_llmrec_a_users_test_item_is_not_in_their_training_rows(tmp_path):
    run_script(
        "data_prep/llmrec.py", "--reviews", FIXTURES / "amazon/reviews_2018.json", "--items",
        FIXTURES / "amazon/meta_2018.json", "--domain", "beauty", "--out", tmp_path, "--num-candidates", "4",
    )  # fmt: skip
    test = read_jsonl(tmp_path / "test.jsonl")
    train = read_view(tmp_path / "train_rft_mix.jsonl")
    held_out = {row["user"]: row["item"] for row in test}
    assert held_out and train
    for example in train:
        user = example["id"].split("/", 1)[1]
        item = held_out[user]
        assert example["item_id"] != item["id"], example["id"]  # not the training target
        if example["task"] not in ("direct",) and not example["candidate_ids"]:
            # not in the history shown (direct rows list candidates, which may include any item)
            assert item["title"] not in user_text(example), example["id"]
    # the training targets are the second-to-last reviews: one per user and task
    assert json.dumps(sorted({e["id"] for e in train})) == json.dumps(sorted({r["id"] for r in test}))
