"""GRPO on the tiny model: TRL applies reward_weights as we expect, rewards with variance move the
adapter and constant ones do not, and RFT files missing a label column fail naming it."""

import json
import shutil

import pytest
from conftest import one_step_grpo_recipe, read_view, run_script
from safetensors.torch import load_file
from test_hostile import one_line

from rectune.core.io import DataError
from rectune.training.views import check_examples


def logged(out) -> list[dict]:
    state = sorted(out.glob("checkpoint-*/trainer_state.json"))[-1]
    return [entry for entry in json.loads(state.read_text())["log_history"] if "reward" in entry]


def lora_b(out) -> list:
    return [v for k, v in load_file(out / "adapter_model.safetensors").items() if "lora_B" in k]


def test_reward_weights_make_the_logged_reward(tmp_path, tiny_model, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft", max_steps=2,
        reward_weights=[1.0, 0.5, 2.0], temperature=1.0,
    )  # fmt: skip
    run_script(
        "train/grpo.py", recipe, "--reward_funcs", "tests.grpo_rewards.length", "tests.grpo_rewards.constant", "format"
    )
    entries = logged(tmp_path / "rft")
    assert len(entries) == 2
    for entry in entries:
        means = [entry[f"rewards/{name}/mean"] for name in ("length", "constant", "format")]
        assert means[1] == 1.0 and means[0] > 0
        # TRL's reward is the mean over completions of the weighted sum: here the weighted sum of the means
        assert entry["reward"] == pytest.approx(1.0 * means[0] + 0.5 * means[1] + 2.0 * means[2], rel=1e-5)


def test_a_varying_reward_moves_the_adapter_and_a_constant_one_does_not(tmp_path, tiny_model, train_data):
    runs = {}
    for name in ("length", "constant"):
        out = tmp_path / name
        recipe = one_step_grpo_recipe(
            tmp_path / f"{name}.yaml", tiny_model, train_data / "train_rft.jsonl", out, max_steps=2,
            learning_rate=1e-2, temperature=1.0,
        )  # fmt: skip
        run_script("train/grpo.py", recipe, "--reward_funcs", f"tests.grpo_rewards.{name}")
        runs[name] = (lora_b(out), logged(out))
    # LoRA's B starts at zero: it moves only where the policy gradient is non-zero
    assert any(float(b.abs().max()) > 0 for b in runs["length"][0])
    assert all(float(b.abs().max()) == 0 for b in runs["constant"][0])
    assert all(entry["frac_reward_zero_std"] == 1.0 for entry in runs["constant"][1])


@pytest.mark.parametrize("column", ["conditions", "ground_truth", "task"])
def test_rft_rows_missing_a_label_column_are_refused(tmp_path, train_data, column):
    row = read_view(train_data / "train_rft.jsonl")[0]
    del row[column]
    path = tmp_path / "train_rft.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=f"train_rft.jsonl:1: field '{column}': missing \\(needed by the rewards\\)"):
        check_examples(path, "rft")


def test_a_missing_kg_stops_grpo_before_its_model_loads(tmp_path, tiny_model, train_data):
    """The rewards read the catalog and KG: one missing was a refusal at the first reward, once the model (and an
    SFT adapter merged into it) had loaded and the first rollout was sampled."""
    data = tmp_path / "data"
    shutil.copytree(train_data, data)
    (data / "kg.jsonl").unlink()
    recipe = one_step_grpo_recipe(tmp_path / "g.yaml", tiny_model, data / "train_rft.jsonl", tmp_path / "rft")
    result = run_script("train/grpo.py", recipe, check=False)
    one_line(result, f"{data / 'kg.jsonl'}: file not found (needed beside {data / 'train.jsonl'}")
    assert "Loading weights" not in result.stderr and not (tmp_path / "rft").exists()
