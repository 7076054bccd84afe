"""Runs that travel: moved run folders load from anywhere, recipe.yaml reruns, cards carry Hub metadata,
data folders load with `datasets`, W&B runs resume, validation during training, the `rectune` command."""

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml
from conftest import RELEASE, ROOT, read_jsonl, read_view, run_script, wandb_run, write_recipe

from rectune.core.io import DataError, RecTuneError
from rectune.models.checkpoints import adapter_chain
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.sharing import make_portable, resolve_base
from rectune.training.best_checkpoint import BestMetricLogged

LORA = {"use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"]}


def sft_recipe(tmp_path, model, out, **extra):
    values = {
        "model_name_or_path": str(model), **LORA, "output_dir": str(out), "max_steps": 2,
        "per_device_train_batch_size": 3, "learning_rate": 3e-3, "save_steps": 1, "report_to": ["none"],
        "max_length": 256, "seed": 0,
        "datasets": [{"path": "json", "data_files": "not/used/when/train_data/is/given.jsonl"}], **extra,
    }  # fmt: skip
    return write_recipe(tmp_path / "sft.yaml", **values)


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory, tiny_model, train_data):
    """outputs/<run>/{sft,sft_rft} trained on the tiny model, then moved to another folder."""
    tmp = tmp_path_factory.mktemp("shared")
    run = tmp / "outputs" / "tiny"
    recipe = sft_recipe(tmp, tiny_model, run / "sft")
    run_script("train/sft.py", recipe, "--train_data", train_data, "--learning_rate", "0.002")
    grpo = {
        "model_name_or_path": str(tiny_model), **LORA, "output_dir": str(run / "sft_rft"), "max_steps": 1,
        "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8, "report_to": ["none"],
        "datasets": [{"path": "json", "data_files": "not/used.jsonl"}], "init_adapter": str(run / "sft"),
        "save_steps": 1,
    }  # fmt: skip
    run_script("train/grpo.py", write_recipe(tmp / "grpo.yaml", **grpo), "--train_data", train_data)
    moved = tmp / "elsewhere" / "tiny"
    moved.parent.mkdir()
    shutil.move(run, moved)
    return moved


def test_a_stage_trained_on_train_data_saves_a_recipe_naming_that_data(shared_run, train_data):
    for stage in ("sft", "sft_rft"):
        saved = yaml.safe_load((shared_run / stage / "recipe.yaml").read_text())
        assert saved["train_data"] == str(train_data) and "datasets" not in saved  # not the recipe's unused files


def test_a_moved_run_folder_loads_every_stage_from_another_directory(tmp_path, shared_run, movie_data):
    assert json.loads((shared_run / "sft_rft" / "base_chain.json").read_text()) == {
        "base_model": json.loads((shared_run / "sft" / "adapter_config.json").read_text())["base_model_name_or_path"],
        "merged_adapters": ["../sft"],
        "merged_sha256": [adapter_fingerprint(shared_run / "sft")],
    }
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    for stage in ("sft", "sft_rft"):
        result = run_script(
            "evaluate/run.py", "--model", shared_run, "--stage", stage, "--data", movie_data / "test.jsonl",
            "--out", tmp_path / stage, "--limit", "2", "--max-new-tokens", "4", "--no-wandb", cwd=elsewhere,
        )  # fmt: skip
        config = json.loads((tmp_path / stage / "config.json").read_text())
        assert config["trained_by"]["stage"] == stage, result.stdout
    assert json.loads((tmp_path / "sft_rft" / "config.json").read_text())["merged_adapters"] == [
        str((shared_run / "sft").resolve())
    ]
    # a checkpoint of the stage too: it named the merged SFT base, which went as the stage ended
    checkpoint = shared_run / "sft_rft" / "checkpoint-1"
    flags = ["--data", movie_data / "test.jsonl", "--limit", "2", "--max-new-tokens", "4", "--no-wandb"]
    run_script("evaluate/run.py", "--model", checkpoint, "--out", tmp_path / "checkpoint", *flags, cwd=elsewhere)
    assert json.loads((tmp_path / "checkpoint" / "config.json").read_text())["merged_adapters"] == [
        str((shared_run / "sft").resolve())
    ]


def test_plain_peft_loads_the_moved_stages(shared_run):
    # the merged SFT base went once the SFT->RFT stage was saved; train/sft_base.py builds it again
    assert not (shared_run / "sft" / "merged").exists()
    run_script("train/sft_base.py", shared_run / "sft")
    assert (shared_run / "sft" / "merged" / "config.json").is_file()
    code = (
        "from peft import AutoPeftModelForCausalLM, PeftModel\n"
        "sft = AutoPeftModelForCausalLM.from_pretrained('{sft}').merge_and_unload()\n"
        "PeftModel.from_pretrained(sft, '{rft}')\n"
        "import os; os.chdir('{rft}')\n"
        "AutoPeftModelForCausalLM.from_pretrained('.')  # its base: ../sft/merged, relative to the folder\n"
    ).format(sft=shared_run / "sft", rft=shared_run / "sft_rft")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd="/")


def test_the_saved_recipe_reruns_to_the_same_configuration(tmp_path, shared_run):
    first = yaml.safe_load((shared_run / "sft" / "recipe.yaml").read_text())
    assert first["learning_rate"] == 0.002 and "eos_token" not in first and "hub_token" not in first
    assert "use_cpu" not in first  # this machine's defaults are applied again on rerun, not frozen
    rerun = tmp_path / "rerun"
    run_script("train/sft.py", shared_run / "sft" / "recipe.yaml", "--output_dir", rerun, "--max_steps", "1")
    second = yaml.safe_load((rerun / "recipe.yaml").read_text())
    assert {k: v for k, v in second.items() if k not in ("output_dir", "max_steps")} == {
        k: v for k, v in first.items() if k not in ("output_dir", "max_steps")
    }


def test_the_saved_grpo_recipe_parses_to_itself(shared_run):
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig

    from rectune.training.arguments import RftArguments, RunArguments
    from rectune.training.recipes import resolved_recipe

    saved = yaml.safe_load((shared_run / "sft_rft" / "recipe.yaml").read_text())
    types = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments)
    assert resolved_recipe(types, [str(shared_run / "sft_rft" / "recipe.yaml")]) == saved
    assert saved["train_data"] and saved["init_adapter"]


def test_eval_runs_are_named_after_the_stage_they_evaluate():
    from rectune.evaluation.tracking import eval_run_name

    trained = {"recipe": "qwen3b_movie", "stage": "sft_rft", "wandb_run": {"id": "abc"}}
    config = {"data": "data/recbench_movie/test.jsonl", "checkpoint": "outputs/qwen3b_movie", "trained_by": trained}
    assert eval_run_name(config) == "qwen3b_movie-sft_rft-recbench_movie"
    assert eval_run_name({**config, "trained_by": None, "checkpoint": "embedded:smollm2"}) == "smollm2-recbench_movie"


def test_a_stranger_adapters_run_files_give_only_what_they_should(tmp_path):
    """An adapter folder from elsewhere carries finished.json and wandb_run.json: a list there was an AttributeError
    in evaluation, and whatever else they held went into the report's config.json."""
    from rectune.core.io import DataError
    from rectune.evaluation.reports import training_run
    from rectune.models.checkpoints import Checkpoint

    checkpoint = Checkpoint("adapter", str(tmp_path), "base", str(tmp_path))
    (tmp_path / "finished.json").write_text(json.dumps({"recipe": {"env": "x"}, "stage": "sft", "global_step": 3}))
    (tmp_path / "wandb_run.json").write_text(json.dumps({"id": "abc", "url": ["\x1b]52;c;x\x07"], "api_key": "k"}))
    assert training_run(checkpoint) == {"recipe": None, "stage": "sft", "wandb_run": {"id": "abc"}}
    (tmp_path / "finished.json").write_text("[]")
    with pytest.raises(DataError, match=r"finished.json: expected a JSON object, got list"):
        training_run(checkpoint)


def test_bad_flags_give_one_line(tmp_path, tiny_model):
    result = run_script("train/sft.py", sft_recipe(tmp_path, tiny_model, tmp_path / "o"), "--lerning_rate", "1",
                        check=False)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: unknown flag --lerning_rate (not a field of SFTConfig, ModelConfig, DatasetMixtureConfig, "
        "RunArguments); did you mean --learning_rate?"
    ]


def test_cards_files_and_modes(shared_run):
    card = (shared_run / "sft_rft" / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "peft" and front["base_model"] and "rectune" in front["tags"]
    assert "grpo" in front["tags"] and front["datasets"]
    assert "base_chain.json" in card and "fine-tuned version of [None]" not in card
    mask = os.umask(0)
    os.umask(mask)
    for path in (shared_run / "sft").iterdir():
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path
    assert not (shared_run / "sft" / "wandb").exists()  # W&B files stay out of a pushed folder


def test_the_embedded_model_is_recorded_by_its_hub_id(tmp_path, monkeypatch):
    monkeypatch.setenv("RECTUNE_CACHE", str(tmp_path / "cache"))
    embedded = tmp_path / "cache" / "smollm2-135m-instruct"
    embedded.mkdir(parents=True)
    (embedded / "config.json").write_text("{}")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(embedded)}))
    make_portable(adapter, str(embedded))
    recorded = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert resolve_base(recorded) == str(embedded)  # loaded from the embedded copy where it is installed


def test_an_adapter_on_an_sft_then_rft_adapter_elsewhere_records_the_whole_chain(tmp_path):
    """RFT after SFT then RFT: the SFT adapter's own chain is relative to it, not to the new adapter's folder, so
    copying it as it was named another folder (``../sft`` from ``b/c/rft`` is ``b/c/sft``). An adapter of the
    chain retrained in place since was loaded under adapters trained on the old one, without a word."""
    for folder in ("a/sft", "a/sft_rft", "b/c/rft"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "m"}))
    make_portable(tmp_path / "a/sft", "org/base")
    make_portable(tmp_path / "a/sft_rft", "org/base", str(tmp_path / "a/sft"))
    make_portable(tmp_path / "b/c/rft", "org/base", str(tmp_path / "a/sft_rft"))
    chain = json.loads((tmp_path / "b/c/rft" / "base_chain.json").read_text())
    assert chain == {
        "base_model": "org/base",
        "merged_adapters": ["../../../a/sft", "../../../a/sft_rft"],
        "merged_sha256": [adapter_fingerprint(tmp_path / "a/sft"), adapter_fingerprint(tmp_path / "a/sft_rft")],
    }
    config = json.loads((tmp_path / "b/c/rft" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "../../../a/sft_rft/merged"
    assert adapter_chain(tmp_path / "b/c/rft") == ("org/base", [str(tmp_path / "a/sft"), str(tmp_path / "a/sft_rft")])
    # the SFT adapter retrained in its folder: the same path, another model under the adapters trained on it
    (tmp_path / "a/sft" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base", "r": 8}))
    for adapter in ("a/sft_rft", "b/c/rft"):
        with pytest.raises(DataError, match=f"the SFT adapter it builds on, {tmp_path / 'a/sft'}, changed since this"):
            adapter_chain(tmp_path / adapter)
    del chain["merged_sha256"]  # a chain recorded before the hashes were: nothing to compare
    (tmp_path / "b/c/rft" / "base_chain.json").write_text(json.dumps(chain))
    assert adapter_chain(tmp_path / "b/c/rft")[1] == [str(tmp_path / "a/sft"), str(tmp_path / "a/sft_rft")]


def test_data_folders_load_per_file_kind_with_datasets(tmp_path):
    from datasets import load_dataset

    out = tmp_path / "data"
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "0.5")
    assert len(load_dataset(str(out), "test", split="train")) == len(read_jsonl(out / "test.jsonl"))
    assert "query" in load_dataset(str(out), "train", split="train").column_names  # rows; views derive on training
    assert (out / "README.md").stat().st_mode & 0o044  # readable by others


def test_validation_during_training_and_early_stopping(tmp_path, tiny_model):
    data = tmp_path / "data"
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", data, "--test-size", "0",
               "--valid-size", "0.5")  # fmt: skip
    train_rows = len(read_view(data / "train_sft.jsonl"))
    assert read_view(data / "valid_sft.jsonl")
    out = tmp_path / "sft"
    recipe = sft_recipe(
        tmp_path, tiny_model, out, max_steps=6, eval_strategy="steps", eval_steps=1, save_strategy="steps",
        load_best_model_at_end=True, metric_for_best_model="eval_loss", learning_rate=0.0,
    )  # fmt: skip
    result = run_script("train/sft.py", recipe, "--train_data", data, "--early_stopping_patience", "1")
    state = json.loads(sorted(out.glob("checkpoint-*/trainer_state.json"))[-1].read_text())
    evals = [entry for entry in state["log_history"] if "eval_loss" in entry]
    assert evals and state["global_step"] < 6, result.stderr[-2000:]  # a flat loss stops early
    assert len(read_view(data / "train_sft.jsonl")) == train_rows  # no training row taken for validation
    # a metric SFT does not log was transformers' KeyError, a traceback, once the first evaluation was in
    recipe = sft_recipe(
        tmp_path, tiny_model, tmp_path / "other", max_steps=2, eval_strategy="steps", eval_steps=1,
        save_strategy="steps", load_best_model_at_end=True, metric_for_best_model="recall",
    )  # fmt: skip
    result = run_script("train/sft.py", recipe, "--train_data", data, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.splitlines()[-1]  # which metrics SFT logs besides its loss depends on the device's setup
    assert (
        last.startswith(
            "error: metric_for_best_model 'recall': the evaluation at step 1 logged no eval_recall (it logs "
        )
        and " loss," in last
        and last.endswith("); name one of them")
    ), result.stderr[-600:]


def test_the_best_metric_is_checked_against_what_the_evaluation_logged():
    args = SimpleNamespace(metric_for_best_model="loss")
    state, metrics = SimpleNamespace(global_step=20), {"eval_loss": 1.5, "eval_runtime": 0.1, "epoch": 1.0}
    BestMetricLogged().on_evaluate(args, state, None, metrics=metrics)  # "loss" is transformers' eval_loss
    BestMetricLogged().on_evaluate(SimpleNamespace(metric_for_best_model="eval_loss"), state, None, metrics=metrics)
    with pytest.raises(RecTuneError) as caught:
        BestMetricLogged().on_evaluate(
            SimpleNamespace(metric_for_best_model="eval_reward"), state, None, metrics=metrics
        )
    assert str(caught.value) == (
        "metric_for_best_model 'eval_reward': the evaluation at step 20 logged no eval_reward (it logs loss, runtime); "
        "name one of them"
    )


def test_a_resumed_stage_resumes_its_wandb_run(tmp_path, tiny_model, train_data, monkeypatch):
    # each run starts its own W&B service, as a user's would (a service shared with this test process
    # would still hold the killed run's id)
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    out = tmp_path / "run" / "sft"
    recipe = sft_recipe(tmp_path, tiny_model, out, max_steps=3, report_to=["wandb"])
    killed = run_script("train/sft.py", recipe, "--train_data", train_data, fault="saved:checkpoint-1", check=False)
    assert killed.returncode == -9
    first = json.loads((out / "wandb_run.json").read_text())["id"]
    run_script("train/sft.py", recipe, "--train_data", train_data)
    assert json.loads((out / "wandb_run.json").read_text())["id"] == first
    runs = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*"))
    assert len(runs) == 2 and all(r.endswith(first) for r in runs)  # the same run id, resumed
    names = {wandb_run(run_file)["name"] for run in runs for run_file in glob.glob(f"{run}/run-*.wandb")}
    assert names - {None} == {f"{recipe.stem}-sft"}  # <recipe>-<stage>; the killed run's file may end before it


def test_a_recipe_named_past_wandbs_limit_on_tags_logs_its_run(tmp_path, tiny_model, train_data, monkeypatch):
    """A recipe file's name tags its runs; one of over 64 characters was W&B's ValidationError as training began."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    name = "qwen2.5-3b-instruct-movie-lora-r16-sft-then-grpo-k10-candidates-20-version2"  # 75 characters
    recipe = sft_recipe(tmp_path, tiny_model, tmp_path / "run" / "sft", max_steps=1, report_to=["wandb"])
    recipe = recipe.rename(tmp_path / f"{name}.yaml")
    run_script("train/sft.py", recipe, "--train_data", train_data)
    (run_file,) = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    run = wandb_run(run_file)
    assert (run["name"], run["group"], run["tags"]) == (f"{name}-sft", name, ["sft"])  # the group holds it whole


def test_a_training_run_whose_wandb_server_does_not_answer_logs_offline(tmp_path, tiny_model, train_data, monkeypatch):
    """A key and no W&B server to reach (an air-gapped cluster): wandb.init's CommError was a traceback as training
    began."""
    with socket.socket() as probe:  # a port of this machine that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")  # W&B's own setting; 90 s by default
    recipe = sft_recipe(tmp_path, tiny_model, tmp_path / "run" / "sft", max_steps=1, report_to=["wandb"])
    result = run_script("train/sft.py", recipe, "--train_data", train_data)
    assert "W&B could not start the run online (Timed out while retrying:" in result.stderr, result.stderr[-2000:]
    assert glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert (tmp_path / "run" / "sft" / "finished.json").is_file()


def test_the_rectune_command_is_a_front_door(tmp_path):
    rectune = shutil.which("rectune", path=os.path.dirname(sys.executable))
    assert rectune, "pip install -e . installs the rectune command"
    result = subprocess.run([rectune, "sft", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and "\nusage: sft.py RECIPE.yaml [--flag value ...]\n" in "\n" + result.stdout
    assert "--train_data" in result.stdout and "--help-all" in result.stdout
    result = subprocess.run([rectune, "sft-base", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("usage: sft_base.py [-h] sft")  # every train/ script
    result = subprocess.run([rectune, "score", "--data", "x"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and "required" in result.stderr
    result = subprocess.run([rectune, "nope"], capture_output=True, text=True)
    assert result.returncode == 2 and "unknown subcommand 'nope'" in result.stderr
    result = subprocess.run([rectune, "prep", "demo_world", "--users", "0"], capture_output=True, text=True)
    assert result.returncode == 2 and "demo_world.py: error: argument --users" in result.stderr  # the script's name
    assert (ROOT / "train" / "sft.py").is_file()


def test_the_card_and_base_record_are_written_before_a_push(tmp_path, tiny_model, monkeypatch):
    """transformers' save_model pushes through create_model_card: RecTune's card must be there by then."""
    from types import SimpleNamespace

    from rectune.training.setup import save_stage

    pushed = {}

    class Trainer:
        args = SimpleNamespace(output_dir=str(tmp_path / "sft"), max_steps=3)
        accelerator = SimpleNamespace(is_main_process=True)
        state = SimpleNamespace(global_step=3)
        callback_handler = SimpleNamespace(callbacks=[])

        def save_model(self, output_dir):  # what Trainer.save_model does with push_to_hub: save, card, upload
            os.makedirs(output_dir, exist_ok=True)
            config = {"base_model_name_or_path": str(tiny_model), "peft_type": "LORA"}
            with open(os.path.join(output_dir, "adapter_config.json"), "w") as handle:
                json.dump(config, handle)
            self.create_model_card(model_name="x")
            pushed["README.md"] = (tmp_path / "sft" / "README.md").read_text()

    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path=str(tiny_model), output_dir=str(tmp_path / "sft"))
    from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

    from rectune.training.arguments import RunArguments
    from rectune.training.recipes import parse_recipe

    configs = parse_recipe((SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe)])[:-1]
    metadata = {"stage": "sft", "recipe": "r", "base_model": str(tiny_model), "data": ["data/demo/train_sft.jsonl"]}
    monkeypatch.setattr(sys, "argv", ["sft.py", str(recipe)])
    save_stage(Trainer(), configs, metadata, recipe, str(tiny_model))
    front = yaml.safe_load(pushed["README.md"].split("---")[1])
    assert front["base_model"] == str(tiny_model) and front["datasets"] == ["demo"]
    assert (tmp_path / "sft" / "finished.json").is_file()
