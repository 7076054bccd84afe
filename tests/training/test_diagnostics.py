"""GRPO diagnostics: per-reward group statistics on hand-made reward tables, the end-of-run summary,
and both on a tiny GRPO run."""

import json
import math

import pytest
import torch
from conftest import one_step_grpo_recipe, run_script

from rectune.training.diagnostics import DIAGNOSTICS, STEP_PARTS, group_statistics, reward_curve, summary

NAN = math.nan


def test_group_statistics_by_hand():
    # two groups of three completions, two rewards; the second reward skips one completion
    table = torch.tensor(
        [[0.0, 1.0], [0.0, NAN], [0.0, 1.0],  # group 1: recall constant at 0; format constant among scored
         [0.5, 0.0], [0.0, 1.0], [0.0, 1.0]]  # group 2: recall varies; format varies
    )  # fmt: skip
    stats = group_statistics(table, 3, ["recall", "format"])
    assert stats["rewards/recall/zero_std_groups"] == 0.5
    assert stats["rewards/recall/positive_share"] == pytest.approx(1 / 6)
    assert stats["rewards/format/zero_std_groups"] == 0.5
    assert stats["rewards/format/positive_share"] == pytest.approx(4 / 5)


def test_groups_with_fewer_than_two_scored_completions_are_left_out():
    table = torch.tensor([[NAN], [1.0], [NAN], [NAN]])
    assert group_statistics(table, 2, ["misinformed"]) == {"rewards/misinformed/positive_share": 1.0}


def entry(recall_constant, recall_positive, step):
    return {
        "step": step, "reward": 0.5, "frac_reward_zero_std": 0.5, "kl": 0.01, "completions/mean_length": 20.0,
        "completions/clipped_ratio": 0.0, "rewards/recall/mean": 0.0, "rewards/recall/std": 0.0,
        "rewards/recall/zero_std_groups": recall_constant, "rewards/recall/positive_share": recall_positive,
        "rewards/format/mean": 0.5, "rewards/format/std": 0.2, "rewards/format/zero_std_groups": 0.25,
        "rewards/format/positive_share": 0.75,
    }  # fmt: skip


def test_summary_names_a_reward_that_never_varied():
    history = [entry(1.0, 0.0, 1), entry(1.0, 0.0, 2), {"train_runtime": 3.0, "step": 2}]
    text = summary(history, ["recall", "format"])
    assert "over 2 logged steps" in text
    assert "format: mean 0.5, std 0.2, above 0 in 0.75 of completions, constant in 0.25 of groups" in text
    assert "KL 0.01;" in text
    lines = text.splitlines()
    assert lines[-1] == "  warning: recall never varied within a group in 2 steps: it gave GRPO no gradient"
    assert not any("format never" in line for line in lines)


def test_summary_is_quiet_when_rewards_vary():
    text = summary([entry(1.0, 0.0, 1), entry(0.5, 0.25, 2)], ["recall", "format"])
    assert "warning" not in text
    assert "recall: mean 0, std 0, above 0 in 0.125 of completions, constant in 0.75 of groups" in text


def test_the_reward_curve_averages_consecutive_steps():
    # ten steps, rewards 0..9, eight points: the first two points take two steps each (0.5, 2.5)
    history = [{**entry(0.5, 0.25, step), "reward": float(step - 1)} for step in range(1, 11)]
    text = summary(history, ["recall", "format"])
    assert "  reward by steps: 1-2 0.5, 3-4 2.5, 5 4, 6 5, 7 6, 8 7, 9 8, 10 9" in text.splitlines()
    assert reward_curve(history[:3]) == "1 0, 2 1, 3 2"
    # a step whose total reward was not finite is logged with None: left out of its slice's mean, "-" alone
    history[1]["reward"], history[2]["reward"] = None, float("nan")
    assert reward_curve(history[:3], points=2) == "1-2 0, 3 -"


def test_the_summary_averages_the_seconds_of_each_part():
    parts = {"generate": 2.0, "prefill": 1.0, "rewards": 0.5, "forward": 3.0, "backward": 4.0, "optimizer": 0.25,
             "other": 0.125}  # fmt: skip
    history = [{**entry(0.5, 0.25, step), **{f"seconds/{k}": v * step for k, v in parts.items()}} for step in (1, 2)]
    line = next(line for line in summary(history, ["recall", "format"]).splitlines() if "seconds" in line)
    # steps 1 and 2 log each part once and twice over: the averages are 1.5 times the values
    assert line == ("  seconds a step: generate 3, rewards 0.75, forward 4.5, backward 6, optimizer 0.375, "
                    "other 0.188 (prefill 1.5 of generate)")  # fmt: skip


def test_a_tiny_grpo_run_logs_and_summarises_the_diagnostics(tmp_path, tiny_model, train_data):
    out = tmp_path / "rft"
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", out, max_steps=2,
        temperature=1.0, beta=0.1,
    )  # fmt: skip
    # the tests' own rewards come from outside RecTune: named on the command line, as a user would
    result = run_script(
        "train/grpo.py", recipe, "--reward_funcs", "tests.grpo_rewards.length", "tests.grpo_rewards.constant"
    )
    state = json.loads(sorted(out.glob("checkpoint-*/trainer_state.json"))[-1].read_text())
    steps = [e for e in state["log_history"] if "reward" in e]
    assert len(steps) == 2
    for step in steps:
        assert step["rewards/constant/zero_std_groups"] == 1.0  # the same 1.0 for every completion
        assert step["rewards/constant/positive_share"] == 1.0
        assert step["rewards/length/positive_share"] > 0
        assert "kl" in step
        parts = {part: step[f"seconds/{part}"] for part in STEP_PARTS}
        assert parts["generate"] >= parts["prefill"] > 0 and parts["forward"] > 0 and parts["backward"] > 0
        assert min(parts.values()) >= 0 and sum(parts.values()) - parts["prefill"] <= step["step_time"] + 1.0
    report = (out / DIAGNOSTICS).read_text()
    assert "warning: constant never varied within a group in 2 steps" in report
    assert "length never" not in report
    assert report.strip().splitlines()[-1] in result.stdout
