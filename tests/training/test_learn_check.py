"""The learn check's reward and its verdict, on hand-computed values."""

import json
import re

import pytest
from conftest import run_script

from rectune.training.learn_check import TARGET_CHARS, answer_length, clear_rise, paired_rise, reward_curve, rise


def test_the_reward_peaks_at_the_target_length_in_both_completion_forms():
    assert TARGET_CHARS == 80
    texts = ["x" * 80, "x" * 40, "x" * 120, "x" * 160, "x" * 400, ""]
    assert answer_length(texts) == [1.0, 0.5, 0.5, 0.0, 0.0, 0.0]
    conversational = [[{"role": "assistant", "content": "  " + "x" * 60 + "  "}]]  # TRL's chat form, stripped
    assert answer_length(conversational) == [pytest.approx(0.75)]


def test_a_rise_counts_only_beyond_three_standard_errors():
    # first window 0.2, 0.3, 0.1 (mean 0.2, variance 0.01); last 0.5, 0.6, 0.4 (mean 0.5, variance 0.01)
    first, last, error = rise([0.2, 0.3, 0.1, 0.9, 0.5, 0.6, 0.4], 3)
    assert (first, last) == pytest.approx((0.2, 0.5)) and error == pytest.approx((0.01 / 3 + 0.01 / 3) ** 0.5)
    assert clear_rise(first, last, error)  # 0.3 >= 3 x 0.0816 = 0.245
    assert not clear_rise(0.2, 0.4, 0.08)  # 0.2 < 0.24: within noise
    assert not clear_rise(0.2, 0.28, 0.0)  # below the 0.1 floor however steady


def test_the_held_out_rise_is_taken_prompt_by_prompt():
    # differences 0.5, 0.3, 0.7: mean 0.5, sample variance 0.04, standard error 0.2 / sqrt(3)
    base, tuned, error = paired_rise([0.0, 0.2, 0.1], [0.5, 0.5, 0.8])
    assert (base, tuned) == pytest.approx((0.1, 0.6)) and error == pytest.approx(0.2 / 3**0.5)
    assert clear_rise(base, tuned, error)  # 0.5 >= 3 x 0.115
    # the same means with differences of opposite signs: far within noise
    base, tuned, error = paired_rise([0.0, 1.0, 0.0], [1.0, 0.0, 0.5])
    assert not clear_rise(base, tuned, error)


def test_the_curve_is_read_from_the_trainer_state(tmp_path):
    state = tmp_path / "trainer_state.json"
    history = [{"rewards/answer_length/mean": 0.1, "step": 1}, {"loss": 0.3}, {"rewards/answer_length/mean": 0.4}]
    state.write_text(json.dumps({"log_history": history}))
    assert reward_curve(state) == [0.1, 0.4]


@pytest.mark.slow
def test_a_short_learn_check_shows_grpo_learning(tmp_path):
    """The learn check at 10 steps on the embedded model, with larger steps (learning rate 1e-3) than the
    recipe's 40 steps at 3e-4: the script exits 1 unless the saved adapter's greedy answers to 48 held-out
    prompts earn more reward than the base model's, beyond noise."""
    world, release, data = tmp_path / "world", tmp_path / "release", tmp_path / "movie"
    run_script("data_prep/demo_world.py", "--out", world)
    run_script(
        "data_prep/build_benchmark.py", "--kg", world / "items.jsonl", "--ratings", world / "ratings.dat",
        "--users", world / "users.dat", "--out", release,
    )  # fmt: skip
    run_script(
        "data_prep/recbench.py", "--src", release, "--domain", "movie", "--kg", release / "kg.jsonl",
        "--test-size", "0.15", "--out", data,
    )  # fmt: skip
    # 48 held-out prompts, not the script's 16: a seeded 10-step run lands where the CPU's float rounding
    # sends it, and on 16 prompts one such run (TRL's forward) rose +0.25 at 2.95 standard errors; on 48,
    # the default shared-prefix path at seeds 42, 1, 2 and 3 rose +0.26 to +0.51 at 4.7 standard errors or
    # more (docs/training.md)
    result = run_script(
        "train/learn_check.py", "--data", data, "--out", tmp_path / "check", "--max_steps", "10", "--window", "3",
        "--prompts", "48", "--learning_rate", "1e-3", "--save_steps", "10", check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    base, tuned = map(float, re.search(r"base ([\d.]+), saved adapter ([\d.]+)", result.stdout).groups())
    assert tuned - base >= 0.1
