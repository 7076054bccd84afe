"""ReRec's reasoning-aware advantage and online curriculum: the arithmetic by hand, then a GRPO run with both."""

import ast
import json
import math

import pytest
from conftest import RELEASE, one_step_grpo_recipe, run_script

from rectune.training.shaping import (
    Curriculum,
    ShapingArguments,
    rank_advantages,
    reasoning_aware,
    token_items,
    token_lines,
)


def test_token_lines_by_hand():
    assert token_lines(["Heat", " is", "\n", "\nJaws"]) == [0, 0, 0, 2]
    assert token_lines(["a\nb", "c", "\n\n", "d"]) == [0, 1, 1, 3]  # a token spanning a newline: its first line
    assert token_lines([]) == []


def test_reasoning_aware_advantage_by_hand():
    # A 1.5, reward 1.0, std 0.5, scale 0.7: 1.5 - 0.3 * 1.0 / 0.5 = 0.9 on the flagged token
    assert reasoning_aware(1.5, 1.0, 0.5, [False, True], 0.7) == pytest.approx([1.5, 0.9])
    # the same as recomputing the advantage with 0.7 x the reward: group mean 0.25 -> (0.7 - 0.25) / 0.5
    assert reasoning_aware((1.0 - 0.25) / 0.5, 1.0, 0.5, [True], 0.7) == pytest.approx([(0.7 - 0.25) / 0.5])
    assert reasoning_aware(-0.4, 0.0, 0.5, [True, True], 0.7) == [-0.4, -0.4]  # no reward, nothing to lower
    assert reasoning_aware(2.0, 1.0, 1.0, [True], 1.0) == [2.0]  # scale 1: off
    # a negative reward is lowered, not raised: -0.1 - 0.3 * 0.05 / 0.5 = -0.13 (0.7 x -0.05 would credit it)
    assert reasoning_aware(-0.1, -0.05, 0.5, [True, False], 0.7) == pytest.approx([-0.13, -0.1])
    # rewards that did not spread (a group all unboxed, -0.05 each; TRL's std 1e-4 + float noise): no change,
    # where dividing by the floor would give a flagged token 0.3 * 0.05 / 1e-4 = +150
    assert reasoning_aware(0.0, -0.05, 1e-4 + 4e-9, [True, False], 0.7) == [0.0, 0.0]


def test_curriculum_order_by_hand():
    curriculum = Curriculum(easy_cutoff=0.1)
    ids = ["a", "b", "c", "d"]
    assert curriculum.order(ids) is None  # nothing recorded: TRL's own order
    # a: rewards 1.0 and 0.9 -> difficulty 0.05 (easy, dropped); b: 0.4 -> 0.6; d: 0.8, 0.6 -> 0.3; c unseen
    curriculum.record(["a", "a", "b", "d", "d"], [1.0, 0.9, 0.4, 0.8, 0.6])
    assert curriculum.order(ids) == [3, 1, 2]
    assert curriculum.difficulty["d"] == pytest.approx(0.3)
    # the next epoch: c found easy too, d harder than b now; None rewards say nothing
    curriculum.record(["c", "d", "d"], [1.0, 0.0, None])
    assert curriculum.order(ids) == [1, 3]
    every_one_easy = Curriculum(0.1)
    every_one_easy.record(["a", "b"], [1.0, 0.95])
    assert every_one_easy.order(["a", "b"]) == [0, 1]  # never an empty epoch


def test_the_curriculum_keeps_a_batch_and_its_state_goes_with_checkpoints():
    curriculum = Curriculum(easy_cutoff=0.1)
    ids = ["a", "b", "c", "d"]
    curriculum.record(["a", "b", "d"], [0.95, 0.4, 0.7])  # difficulties 0.05 (easy), 0.6, 0.3; c unseen
    state = {key: dict(value) for key, value in curriculum.state().items()}
    # a batch of 4 prompts: the easy one comes back rather than an epoch too short for one batch
    assert curriculum.order(ids, minimum=4) == [0, 3, 1, 2]
    resumed = Curriculum(easy_cutoff=0.1)
    resumed.load(json.loads(json.dumps(state)))  # as a checkpoint's curriculum.json holds it
    assert resumed.order(ids, minimum=4) == [0, 3, 1, 2] and resumed.difficulty == curriculum.difficulty


def test_a_run_that_ran_out_of_data_before_max_steps_is_not_finished():
    from types import SimpleNamespace

    from transformers import EarlyStoppingCallback

    from rectune.training.setup import stopped_short

    def trainer(step, callbacks=()):
        return SimpleNamespace(args=SimpleNamespace(max_steps=6), state=SimpleNamespace(global_step=step),
                               callback_handler=SimpleNamespace(callbacks=list(callbacks)))  # fmt: skip

    assert stopped_short(trainer(2)) == "training stopped at step 2 of max_steps 6 (the data ran out)"
    assert stopped_short(trainer(6)) is None
    patient = EarlyStoppingCallback(early_stopping_patience=2)
    patient.early_stopping_patience_counter = 2  # early stopping ended it: that is finished
    assert stopped_short(trainer(2, [patient])) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"reasoning_aware_scale": 1.5}, "reasoning_aware_scale: 1.5 is not between 0 and 1"),
        ({"curriculum_easy_cutoff": -0.1}, "curriculum_easy_cutoff: -0.1 is not between 0 and 1"),
    ],
)
def test_bad_shaping_values(values, message):
    with pytest.raises(ValueError, match=message):
        ShapingArguments(**values)


def test_grpo_with_reasoning_aware_rank_advantages_and_curriculum(tmp_path, tiny_model):
    data = tmp_path / "rerec"
    run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", data, "--test-size", "0.0",
        "--valid-size", "0.0", "--rerec", "--rerec-negatives", "3",
    )  # fmt: skip
    prompts = sum(1 for _ in (data / "train.jsonl").open())  # 8: one prompt a step, so step 9 starts epoch 2
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, data / "train_rft.jsonl", tmp_path / "rft", max_steps=prompts + 2,
        temperature=1.0, reward_funcs=["ndcg_at_k", "boxed_format", "item_alignment"],
        reasoning_aware_scale=0.7, curriculum_reward="ndcg_at_k", rank_advantage=True, save_strategy="steps",
        save_steps=prompts + 1,
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe)
    saved = json.loads((tmp_path / "rft" / f"checkpoint-{prompts + 1}" / "curriculum.json").read_text())
    assert len(saved["difficulty"]) == prompts  # every prompt of the first epoch, for a resumed run's order
    assert f"curriculum: {prompts} of {prompts} prompts this epoch, easiest first" in result.stderr
    resolved = (tmp_path / "rft" / "recipe.yaml").read_text()
    assert "reasoning_aware_scale: 0.7" in resolved and "curriculum_reward: ndcg_at_k" in resolved
    steps = [ast.literal_eval(line) for line in result.stdout.splitlines() if line.startswith("{'loss'")]
    assert len(steps) == prompts + 2 and (tmp_path / "rft" / "adapter_model.safetensors").is_file()


def test_curriculum_reward_must_be_a_reward_of_the_run(tmp_path, tiny_model, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        reward_funcs=["recall"], curriculum_reward="ndcg_at_k",
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe, check=False)
    assert result.returncode != 0
    assert "curriculum_reward: 'ndcg_at_k' is not one of the run's rewards (recall)" in result.stderr


def fake_trainer(pieces: dict, tokenizer=None, **shaping):
    """The attributes of a ShapedGRPOTrainer that its token advantages read, with ``tokenizer`` or one decoding ids by
    hand."""
    from types import MethodType, SimpleNamespace

    import torch

    from rectune.benchmarks import Resources, get_benchmark
    from rectune.data.catalog import KnowledgeGraph
    from rectune.data.titles import CatalogItem, TitleMatcher
    from rectune.training.shaped_trainer import ShapedGRPOTrainer

    matcher = TitleMatcher([CatalogItem("1", "Heat (1995)"), CatalogItem("2", "Ronin (1998)"),
                            CatalogItem("3", "Jaws (1975)"), CatalogItem("4", "千と千尋の神隠し (2001)")])  # fmt: skip
    trainer = SimpleNamespace(
        reward_weights=torch.tensor([1.0]), num_generations=2, scale_rewards="group",
        accelerator=SimpleNamespace(process_index=0),
        processing_class=tokenizer
        or SimpleNamespace(decode=lambda ids, skip_special_tokens: "".join(pieces[i] for i in ids)),
        benchmark=get_benchmark("recbench+"), shaping=ShapingArguments(**shaping),
        resources=Resources.loaded(matcher, KnowledgeGraph(), top_k=2),
    )  # fmt: skip
    for name in ("_summed_rewards", "_benchmark_answer"):
        setattr(trainer, name, MethodType(getattr(ShapedGRPOTrainer, name), trainer))
    return trainer, ShapedGRPOTrainer._token_advantages


def test_token_advantages_lower_the_lines_naming_a_wrong_pick():
    import torch

    trainer, token_advantages = fake_trainer(
        {1: "Jaws", 2: " no", 3: "\n", 4: "\\boxed{Heat}", 0: "<pad>"}, reasoning_aware_scale=0.7
    )
    rewards = torch.tensor([[1.0], [0.0]])  # one group of two completions
    std = float(torch.tensor([1.0, 0.0]).std()) + 1e-4  # TRL's nanstd is the unbiased std: 0.7071
    output = {
        "advantages": torch.tensor([0.5 / std, -0.5 / std]),
        "completion_ids": torch.tensor([[1, 2, 3, 4], [4, 0, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]]),
    }
    inputs = [{"ground_truth_ids": ["1"], "candidate_ids": ["1", "3"]}] * 2
    per_token = token_advantages(trainer, output, inputs, rewards)
    lowered = 0.5 / std - 0.3 * 1.0 / std  # "Jaws no\n" names Jaws, a wrong pick: 0.7 x the reward there
    assert per_token[0].tolist() == pytest.approx([lowered, lowered, lowered, 0.5 / std])
    assert per_token[1].tolist() == pytest.approx([-0.5 / std] * 4)  # no wrong pick named


def test_rank_advantages_by_hand():
    # group of two, K 2: reward-to-go [1.0, 0.4] and [0, 0]; per rank: mean 0.5 and 0.2, std 0.7071 and 0.2828
    values = rank_advantages([[0.6, 0.4], [0.0, 0.0]], group=2, k=2)
    assert values == [pytest.approx([0.5 / 0.7072, 0.2 / 0.2829], abs=1e-3), pytest.approx([-0.707, -0.707], abs=1e-3)]
    assert rank_advantages([[0.5], [0.5]], group=2, k=2) == [[0.0], [0.0]]  # the group agrees: no signal; ranks
    # past every answer's end are left out, so a data's K of 100,000 costs what its answers' lengths cost
    assert rank_advantages([[0.6, 0.4], [0.0, 0.0]], group=2, k=100_000) == values
    assert rank_advantages([[0.0, 1.0, 9.0]], group=1, k=2) == [[0.0, 0.0]]  # past K: ignored; a lone completion
    assert token_items(["Heat", " [SEP]", " Jaws", "\n"], [4, 15]) == [0, 1, 1, 2]


def test_item_gains_by_hand():
    from rectune.benchmarks.recbench.ranks import item_gains
    from rectune.data.titles import CatalogItem, TitleMatcher

    matcher = TitleMatcher([CatalogItem("1", "Heat (1995)"), CatalogItem("2", "Ronin (1998)"),
                            CatalogItem("13", "Casino (1995)")])  # fmt: skip
    ideal = 1 + 1 / math.log2(3)
    assert item_gains("Heat [SEP] Casino [SEP] Ronin", {"1", "2"}, set(), 2, matcher) == [
        (4, pytest.approx(1 / ideal)), (17, 0.0), (29, 0.0)]  # fmt: skip
    assert item_gains("Ronin\nHeat", {"1", "2"}, set(), 2, matcher) == [
        (5, pytest.approx(1 / ideal)), (10, pytest.approx(1 / math.log2(3) / ideal))]  # fmt: skip
    # a repeat and (grounded) an item outside the list earn nothing in their slot
    assert [g for _, g in item_gains("Heat [SEP] Heat", {"1", "2"}, set(), 2, matcher)] == [pytest.approx(1 / ideal), 0]
    assert [g for _, g in item_gains("Ronin [SEP] Heat", {"1", "2"}, {"1"}, 2, matcher)] == [
        0.0, pytest.approx(1 / math.log2(3) / ideal)]  # fmt: skip
    # an intro, or a detail under a title, names no title: it takes no slot, as in the answer's NDCG@K
    assert item_gains("My picks:\nRonin", {"1", "2"}, set(), 2, matcher) == [(15, pytest.approx(1 / ideal))]
    # a title in the reasoning is none of the answer's: the answer's first title takes the first slot
    assert item_gains("<think>Casino? No.</think>\nRonin [SEP] Heat", {"1", "2"}, set(), 2, matcher) == [
        (32, pytest.approx(1 / ideal)), (43, pytest.approx(1 / math.log2(3) / ideal))]  # fmt: skip
    nested = "1. **Heat**\n   - Director: Michael Mann\n2. **Ronin**"
    assert item_gains(nested, {"1", "2"}, set(), 2, matcher) == [
        (11, pytest.approx(1 / ideal)), (52, pytest.approx(1 / math.log2(3) / ideal))]  # fmt: skip


def test_rank_advantage_on_each_item_and_past_k():
    import torch

    pieces = {1: "Heat", 2: " [SEP]", 3: " Jaws", 4: " [SEP] Ronin", 5: "Jaws", 0: "<pad>"}
    trainer, token_advantages = fake_trainer(pieces, rank_advantage=True)
    output = {
        "advantages": torch.tensor([0.25, -0.25]),
        "completion_ids": torch.tensor([[1, 2, 3, 4], [5, 0, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]]),
    }
    inputs = [{"ground_truth_ids": ["1", "2"]}] * 2
    per_token = token_advantages(trainer, output, inputs, torch.tensor([[1.0], [0.0]]))
    # "Heat [SEP] Jaws [SEP] Ronin", K 2: gains 1/ideal, 0, (Ronin past K) 0; "Jaws": 0. Reward-to-go rank 0:
    # 1/ideal against 0, rank 1: 0 against 0 -> rank advantages +0.707 / -0.707, then 0 / 0
    first = 0.25 + 0.707
    assert per_token[0].tolist() == pytest.approx([first, 0.25, 0.25, 0.25 - 0.1], abs=1e-3)
    assert float(per_token[1, 0]) == pytest.approx(-0.25 - 0.707, abs=1e-3)  # its one token; the rest is padding


def test_rank_advantage_credits_a_title_its_tokenizer_writes_in_bytes():
    """A byte-level BPE writes each character of 千と千尋の神隠し in three tokens: decoded one by one they were U+FFFD,
    the title resolved to nothing and its rank earned nothing."""
    import torch
    from test_token_pieces import byte_tokenizer

    tokenizer = byte_tokenizer()
    trainer, token_advantages = fake_trainer({}, tokenizer=tokenizer, rank_advantage=True)
    first, second = (tokenizer(text)["input_ids"] for text in ("千と千尋の神隠し [SEP] Jaws", "Jaws"))
    assert (len(first), len(second)) == (8 * 3 + 11, 4)
    output = {
        "advantages": torch.tensor([0.25, -0.25]),
        "completion_ids": torch.tensor([first, second + [tokenizer.eos_token_id] * (len(first) - 4)]),
        "completion_mask": torch.tensor([[1] * len(first), [1] * 4 + [0] * (len(first) - 4)]),
    }
    inputs = [{"ground_truth_ids": ["4"]}] * 2
    per_token = token_advantages(trainer, output, inputs, torch.tensor([[1.0], [0.0]]))
    # the title earns the one ideal slot (gain 1) against "Jaws"'s 0: rank 0's advantages +0.707 / -0.707; rank 1
    # (Jaws, 0 against nothing) 0. The title's 24 tokens get +0.707, " [SEP] Jaws"'s 11 nothing more
    assert per_token[0].tolist() == pytest.approx([0.25 + 0.707] * 24 + [0.25] * 11, abs=1e-3)
    assert per_token[1, :4].tolist() == pytest.approx([-0.25 - 0.707] * 4, abs=1e-3)
