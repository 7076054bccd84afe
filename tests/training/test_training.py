"""train/sft.py and train/grpo.py end to end on a tiny random model (seconds per run)."""

import glob
import gzip
import importlib.util
import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import (
    CHATML,
    GEMMA2_TEMPLATE,
    gpt2_model,
    model_with_template,
    one_step_grpo_recipe,
    read_view,
    run_script,
    wandb_run,
    write_recipe,
)
from safetensors.torch import load_file, save_file
from test_hostile import one_line

from rectune.core.io import DataError, RecTuneError
from rectune.models.fingerprints import adapter_fingerprint, model_fingerprint
from rectune.training.finite_weights import weights_finite
from rectune.training.prompt_positions import check_prompts_fit
from rectune.training.setup import check_kernels
from rectune.training.views import check_chat_template_path, check_examples, fit_chat_template, view_examples

LORA = {"use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"]}


def sft_recipe(path, model, data, out, **extra):
    values = {
        "model_name_or_path": str(model),
        **LORA,
        "datasets": [{"path": "json", "data_files": str(data / "train_sft.jsonl")}],
        "output_dir": str(out),
        "max_steps": 4,
        "per_device_train_batch_size": 3,
        "learning_rate": 3e-3,
        "logging_steps": 1,
        "save_steps": 2,
        "report_to": ["none"],
        "max_length": 256,
        "seed": 0,
    }
    return write_recipe(path, **{**values, **extra})


def log_history(out):
    return (
        json.loads((out / "trainer_state.json").read_text())["log_history"]
        if (out / "trainer_state.json").exists()
        else json.loads(sorted(out.glob("checkpoint-*/trainer_state.json"))[-1].read_text())["log_history"]
    )


def test_sft_loss_falls_and_run_files_are_saved(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    # every step sees the same 9 examples, so the logged loss is the loss on one fixed set
    recipe = sft_recipe(
        tmp_path / "r.yaml",
        tiny_model,
        train_data,
        out,
        report_to=["wandb"],
        wandb_tags=["test"],
        per_device_train_batch_size=9,
        learning_rate=1e-2,
    )
    run_script("train/sft.py", recipe, "--max_steps", "30", "--save_steps", "30", "--run_name", "lr-1e-2")  # CLI wins
    losses = [e["loss"] for e in log_history(out / "checkpoint-30") if "loss" in e]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.75 * losses[0]
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "recipe.yaml", "README.md"):
        assert (out / name).is_file(), name
    resolved = (out / "recipe.yaml").read_text()
    assert "max_steps: 30" in resolved and "learning_rate: 0.01" in resolved
    card = (out / "README.md").read_text()
    assert "| stage | sft |" in card and f"| base_model | {tiny_model} |" in card and "git_commit" in card
    # W&B files sit beside the stage folder (outputs/<run>/wandb), out of a pushed adapter folder
    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    logged = wandb_run(run_file)
    assert [row["train/loss"] for row in logged["history"] if "train/loss" in row] == pytest.approx(losses)
    rates = [e["learning_rate"] for e in log_history(out / "checkpoint-30") if "learning_rate" in e]
    assert [row["train/learning_rate"] for row in logged["history"] if "train/learning_rate" in row] == rates
    assert logged["name"] == "lr-1e-2"  # the run's own name, not <recipe>-<stage>
    rectune = logged["config"]["rectune"]
    assert rectune["stage"] == "sft" and rectune["base_model"] == str(tiny_model) and rectune["git_commit"]


def test_loss_is_on_the_answer_only(tmp_path, tiny_model, train_data):
    from trl import DatasetMixtureConfig, SFTConfig, SFTTrainer

    from rectune.training.views import load_examples

    mixture = DatasetMixtureConfig(datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}])
    dataset = load_examples(mixture, "sft", None, 0)
    args = SFTConfig(output_dir=str(tmp_path), report_to=[], max_length=256, bf16=False, use_cpu=True)
    trainer = SFTTrainer(model=str(tiny_model), args=args, train_dataset=dataset)
    batch = trainer.data_collator([trainer.train_dataset[0]])  # exactly what the loss sees
    trained = trainer.processing_class.decode(batch["input_ids"][batch["labels"] != -100])
    answer = dataset[0]["completion"][0]["content"]
    assert trained.startswith(answer)
    assert "recommender system" not in trained and dataset[0]["prompt"][1]["content"] not in trained


def test_resume_continues_from_the_last_checkpoint(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, out)
    killed = run_script("train/sft.py", recipe, fault="saved:checkpoint-2", check=False)  # killed after a checkpoint
    assert killed.returncode == -9 and not (out / "finished.json").exists()
    first = [e for e in log_history(out / "checkpoint-2") if "loss" in e]
    run_script("train/sft.py", recipe)
    history = [e for e in log_history(out / "checkpoint-4") if "loss" in e]
    assert [e["step"] for e in history] == [1, 2, 3, 4]
    assert history[:2] == first  # the steps already saved are kept, not redone


@pytest.mark.parametrize(
    ("recipe_text", "message"),
    [
        (
            "lerning_rate: 0.1\n",
            "unknown key 'lerning_rate' (not a field of SFTConfig, ModelConfig, "
            "DatasetMixtureConfig, RunArguments); did you mean 'learning_rate'?",
        ),
        ("learning_rate: [0.1\n", "malformed YAML"),
        ("- just a list\n", "a recipe must be a YAML mapping"),
    ],
)
def test_bad_recipes_fail_clearly(tmp_path, recipe_text, message):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(recipe_text)
    result = run_script("train/sft.py", recipe, "--output_dir", tmp_path / "out", check=False)
    assert result.returncode != 0
    assert f"{recipe}: " in result.stderr and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_recipe_and_data_files(tmp_path, tiny_model, train_data):
    result = run_script("train/sft.py", tmp_path / "nope.yaml", check=False)
    assert "nope.yaml: recipe file not found" in result.stderr
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, tmp_path / "no_data", tmp_path / "out")
    result = run_script("train/sft.py", recipe, check=False)
    assert result.returncode != 0
    assert "no_data/train_sft.jsonl: training data file not found" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before the run claimed its folder
    bad = tmp_path / "bad_data"
    bad.mkdir()
    (bad / "train_sft.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    result = run_script(
        "train/sft.py", sft_recipe(tmp_path / "r2.yaml", tiny_model, bad, tmp_path / "a/o"), check=False
    )
    assert "train_sft.jsonl:1: field 'messages'" in result.stderr
    assert not (tmp_path / "a").exists()  # it stopped after claiming the folders it made: they are gone again
    (tmp_path / "mine").mkdir()  # an empty folder of the user's stays, empty
    result = run_script(
        "train/sft.py", sft_recipe(tmp_path / "r2.yaml", tiny_model, bad, tmp_path / "mine"), check=False
    )
    assert "train_sft.jsonl:1: field 'messages'" in result.stderr and list((tmp_path / "mine").iterdir()) == []
    # a dataset naming no files was a traceback from `datasets` (the json builder with nothing to read)
    for files in (None, []):
        recipe = sft_recipe(tmp_path / "r3.yaml", tiny_model, train_data, tmp_path / "o3")
        values = yaml.safe_load(recipe.read_text())
        values["datasets"][0]["data_files"] = files
        recipe.write_text(yaml.safe_dump(values))
        result = run_script("train/sft.py", recipe, check=False)
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
            "error: recipe: datasets[0] (path 'json') names no data_files: set `data_files: FILE`, a prepared "
            "train_*.jsonl"
        ), result.stderr[-1500:]


def grpo_recipe(path, model, data, out, **extra):
    values = {
        "model_name_or_path": str(model),
        **LORA,
        "datasets": [{"path": "json", "data_files": str(data / "train_rft.jsonl")}],
        "output_dir": str(out),
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 12,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": ["none"],
        "reward_funcs": ["recall", "format", "hallucination", "misinformed"],
        "reward_weights": [1.0, 0.2, 0.2, 1.0],
        "seed": 0,
    }
    return write_recipe(path, **{**values, **extra})


def test_grpo_from_base_and_after_sft(tmp_path, tiny_model, train_data):
    # RFT from the base model
    rft = tmp_path / "rft"
    recipe = grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, rft)
    run = run_script("train/grpo.py", recipe, "--profile_steps", "2")
    # transformers' deprecations of what the rollouts and TRL's configs did, a few lines of every run
    assert "deprecated" not in run.stderr, run.stderr
    history = log_history(rft / "checkpoint-2")
    assert any("rewards/recall/mean" in e for e in history)
    # the profiled step holds the rollouts (sampling draws by inverse CDF: searchsorted) and the backward pass
    profile = (rft / "profile" / "steps-2-2.txt").read_text()
    assert profile.startswith(f"optimizer steps 2-2 of {rft} on ") and "MmBackward0" in profile
    trace = json.loads(gzip.decompress((rft / "profile" / "trace-steps-2-2.json.gz").read_bytes()))
    assert "aten::searchsorted" in {event.get("name") for event in trace["traceEvents"]}
    assert json.loads((rft / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model)

    # SFT, then RFT on the SFT model
    sft = tmp_path / "sft"
    run_script("train/sft.py", sft_recipe(tmp_path / "s.yaml", tiny_model, train_data, sft))
    chained = tmp_path / "sft_rft"
    (sft / "merged").mkdir()  # the user's own folder of that name (say, their own merge): never replaced
    (sft / "merged" / "notes.txt").write_text("mine")
    before = {path: path.stat().st_mtime_ns for path in sft.rglob("*")}
    run_script(
        "train/grpo.py", grpo_recipe(tmp_path / "g2.yaml", tiny_model, train_data, chained), "--init_adapter", sft
    )
    # the SFT folder given as GRPO's own: "finished, nothing to do" said of the SFT stage, and no RFT trained
    refused = run_script("train/grpo.py", grpo_recipe(tmp_path / "g3.yaml", tiny_model, train_data, sft), check=False)
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        f"error: {sft}: holds a finished sft stage, not an rft one; give this stage its own output_dir"
    )
    refused = run_script("train/grpo.py", grpo_recipe(tmp_path / "g3.yaml", tiny_model, train_data, sft),
                         "--init_adapter", sft, check=False)  # fmt: skip
    one_line(refused, f"output_dir {sft}: is init_adapter {sft}, which this run reads")
    # the stage merged its base in its own folder and dropped it: the SFT folder (another run may read it) is as it was
    assert {path: path.stat().st_mtime_ns for path in sft.rglob("*")} == before
    assert not (chained / "_merged_sft_base").exists()
    # what a resume checks it merges again: the SFT adapter, retrained in its folder, would be another base
    started = json.loads((chained / "started.json").read_text())
    assert started["sft_adapter"] == adapter_fingerprint(sft)
    # and the files the rewards read, which data_prep may rewrite with the rows unchanged
    assert [entry.split()[0] for entry in started["reward_files"]] == ["catalog.jsonl", "kg.jsonl"]
    assert started["base_model"]["sha256"] == model_fingerprint(tiny_model)  # and the base, rewritable in place too
    config = json.loads((chained / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "../sft/merged"  # relative to the adapter: the run folder can move
    chain = json.loads((chained / "base_chain.json").read_text())
    assert chain == {"base_model": str(tiny_model), "merged_adapters": ["../sft"],
                     "merged_sha256": [adapter_fingerprint(sft)]}  # fmt: skip
    # plain PEFT loading needs <sft>/merged, which the script builds, but never over a folder it did not build
    refused = run_script("train/sft_base.py", sft, check=False)
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        f"error: {sft / 'merged'}: is there and RecTune did not build it (it has no merged_from.sha256); "
        "move it away, so the merged SFT base can be written there"
    )
    assert (sft / "merged" / "notes.txt").read_text() == "mine"
    shutil.rmtree(sft / "merged")
    run_script("train/sft_base.py", sft)
    base = load_file(tiny_model / "model.safetensors")
    merged = load_file(sft / "merged" / "model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    adapter = load_file(sft / "adapter_model.safetensors")
    lora_a = next(v for k, v in adapter.items() if "layers.0.self_attn.q_proj.lora_A" in k)
    lora_b = next(v for k, v in adapter.items() if "layers.0.self_attn.q_proj.lora_B" in k)
    scale = LORA["lora_alpha"] / LORA["lora_r"]
    # the RFT stage starts from base + the SFT delta, exactly (the merge is deterministic: the one it trained on)
    assert torch.allclose(merged[key], base[key] + scale * lora_b @ lora_a, atol=1e-6)
    assert not torch.allclose(merged[key], base[key])
    assert "| stage | sft_rft |" in (chained / "README.md").read_text()


def test_grpo_needs_an_sft_adapter_of_its_model(tmp_path, tiny_model, train_data):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, tmp_path / "o")
    result = run_script("train/grpo.py", recipe, "--init_adapter", tmp_path, check=False)
    assert result.returncode == 2 and "not a PEFT adapter folder" in result.stderr.splitlines()[-1]
    # an adapter of another model (the same weights, another folder): the merge built on the adapter's recorded
    # base, so that model was trained while the card and records named the recipe's
    other = shutil.copytree(tiny_model, tmp_path / "other_model")
    get_peft_model(AutoModelForCausalLM.from_pretrained(other), LoraConfig(r=2)).save_pretrained(tmp_path / "sft")
    AutoTokenizer.from_pretrained(other).save_pretrained(tmp_path / "sft")
    result = run_script("train/grpo.py", recipe, "--init_adapter", tmp_path / "sft", check=False)
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f"error: init_adapter {tmp_path / 'sft'}: is an adapter of {other}, not of this run's model_name_or_path "
        f"{tiny_model}; name the model it was trained on, or an SFT adapter of this model"
    )
    assert not (tmp_path / "o").exists()


def test_an_sft_adapter_of_the_embedded_model_is_of_it_by_either_name(tmp_path, tiny_model):
    """The adapter records the embedded model by its hub id, which loads from the embedded copy: a recipe naming
    either is that model, and it alone."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rectune.models.embedded import EMBEDDED_HUB_ID, embedded_model_path
    from rectune.models.sharing import make_portable
    from rectune.training.sft_base import check_sft_adapter

    embedded = str(embedded_model_path())
    model = AutoModelForCausalLM.from_pretrained(embedded)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "sft")
    make_portable(tmp_path / "sft", embedded)
    for name in (EMBEDDED_HUB_ID, embedded):
        check_sft_adapter(tmp_path / "sft", name)
    with pytest.raises(RecTuneError, match=f"is an adapter of {re.escape(embedded)}, not of this run's"):
        check_sft_adapter(tmp_path / "sft", str(tiny_model))


def test_grpo_rejects_sft_only_keys_and_unknown_rewards(tmp_path, tiny_model, train_data):
    recipe = grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, tmp_path / "o", reward_funcs=["recal"])
    result = run_script("train/grpo.py", recipe, check=False)
    assert "unknown recbench+ reward 'recal'; choose from recall" in result.stderr


def test_packed_batches_give_the_padded_loss(tmp_path, tiny_model, train_data):
    """Padding-free packing must not let examples attend to each other: same examples, same loss."""
    from trl import DatasetMixtureConfig, SFTConfig, SFTTrainer

    from rectune.training.views import load_examples

    mixture = DatasetMixtureConfig(datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}])
    dataset = load_examples(mixture, "sft", None, 0).select(range(4))
    losses = {}
    for packing in (False, True):
        args = SFTConfig(
            output_dir=str(tmp_path),
            report_to=[],
            max_length=1024,
            bf16=False,
            use_cpu=True,
            packing=packing,
            per_device_train_batch_size=4,
        )
        trainer = SFTTrainer(model=str(tiny_model), args=args, train_dataset=dataset)
        batch = next(iter(trainer.get_train_dataloader()))
        assert batch["input_ids"].shape[0] == (1 if packing else 4)
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "labels")}
        with torch.no_grad():
            losses[packing] = trainer.model(**inputs).loss.item()
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_data_mixture_with_weights(tmp_path, train_data):
    """Several prepared files mixed by TRL's `fraction` weights; a missing one is named."""
    from trl import DatasetMixtureConfig

    from rectune.core.io import DataError
    from rectune.training.views import load_examples

    rows = [json.dumps(example) for example in read_view(train_data / "train_sft.jsonl")]
    (tmp_path / "a.jsonl").write_text("\n".join(rows[:6]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(rows[6:9]) + "\n")
    mixture = DatasetMixtureConfig(
        datasets=[
            {"path": "json", "data_files": str(tmp_path / "a.jsonl"), "fraction": 2.0},
            {"path": "json", "data_files": str(tmp_path / "b.jsonl"), "fraction": 1.0},
        ]
    )
    dataset = load_examples(mixture, "sft", None, 0)
    # weights 2:1 normalised to 2/3 and 1/3; the largest mixture that oversamples neither file has 9 rows
    assert len(dataset) == 9 and set(dataset.column_names) == {"prompt", "completion"}
    answers = [r["completion"][0]["content"] for r in dataset]
    assert answers[:6] == [json.loads(r)["messages"][-1]["content"] for r in rows[:6]]
    missing = DatasetMixtureConfig(datasets=[{"path": "json", "data_files": str(tmp_path / "nope.jsonl")}])
    with pytest.raises(DataError, match="nope.jsonl: training data file not found"):
        load_examples(missing, "sft", None, 0)


def test_the_merged_sft_model_follows_its_adapter(tmp_path, tiny_model):
    """SFT→RFT starts from its merged SFT base: retraining the SFT adapter must rebuild it, an unchanged one must
    not, and a folder there that RecTune did not build is neither used nor replaced."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rectune.training.sft_base import drop_merged_model, merged_model

    def save_adapter(fill: float) -> None:
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=2, target_modules=["q_proj"])
        )
        for name, weight in model.named_parameters():
            if "lora_" in name:
                weight.data.fill_(fill)
        model.save_pretrained(tmp_path / "sft")
        AutoTokenizer.from_pretrained(tiny_model).save_pretrained(tmp_path / "sft")

    key = "model.layers.0.self_attn.q_proj.weight"
    base = load_file(tiny_model / "model.safetensors")[key]
    save_adapter(0.1)
    target = tmp_path / "run" / "_merged_sft_base"
    merged = merged_model(tmp_path / "sft", target)
    first = load_file(merged / "model.safetensors")[key]
    stamp = (merged / "model.safetensors").stat().st_mtime_ns
    assert merged_model(tmp_path / "sft", target) == merged == target
    assert (merged / "model.safetensors").stat().st_mtime_ns == stamp  # unchanged adapter: reused
    save_adapter(0.2)  # "retrained"
    second = load_file(merged_model(tmp_path / "sft", target) / "model.safetensors")[key]
    # delta = (alpha / r) * B @ A with every entry of A and B set: 4 * 2 * fill^2 per entry (alpha 8, r 2)
    assert torch.allclose(first - base, torch.full_like(base, 4 * 2 * 0.1**2), atol=1e-6)
    assert torch.allclose(second - base, torch.full_like(base, 4 * 2 * 0.2**2), atol=1e-6)
    assert drop_merged_model(target) and not target.exists()
    for planted in ("copied", "linked"):  # a model folder of the user's at that name: say, one merged by hand
        if planted == "copied":
            shutil.copytree(tmp_path / "sft", target)
        else:
            target.symlink_to(tmp_path / "sft")
        with pytest.raises(RecTuneError, match="is there and RecTune did not build it"):
            merged_model(tmp_path / "sft", target)
        assert not drop_merged_model(target)
        assert (target / "adapter_config.json").is_file()
        shutil.rmtree(target) if planted == "copied" else target.unlink()


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "user", "content": ["not", "text"]}, {"role": "assistant", "content": "x"}],
         "field 'messages', message 0: 'content' must be a string, got list"),
        ([{"content": "hi"}, {"role": "assistant", "content": "x"}],
         "field 'messages', message 0: 'role' must be one of system, user, assistant"),
        ([{"role": "user", "content": "hi"}, "x"], "field 'messages', message 1: must be an object"),
        ([{"role": "user", "content": "hi"}], "field 'messages': the last message must be the assistant answer"),
    ],
)  # fmt: skip
def test_sft_rows_are_checked_message_by_message(tmp_path, messages, message):
    path = tmp_path / "train_sft.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "a"}]})
                    + "\n" + json.dumps({"messages": messages}) + "\n")  # fmt: skip
    with pytest.raises(DataError, match=re.escape(f"train_sft.jsonl:2: {message}")):
        check_examples(path, "sft")


def test_sft_trains_a_model_whose_template_takes_no_system_message(tmp_path, tiny_model, train_data):
    # TRL rendered each example with Gemma 2's template, which raised on the system message: a traceback
    gemma = model_with_template(tmp_path / "gemma", tiny_model, GEMMA2_TEMPLATE)
    recipe = sft_recipe(tmp_path / "r.yaml", gemma, train_data, tmp_path / "sft", max_steps=1)
    result = run_script("train/sft.py", recipe)
    assert f"{gemma}: its chat template takes no system message; the system prompt opens" in result.stderr
    assert (tmp_path / "sft" / "adapter_model.safetensors").is_file()


def test_a_model_folder_transformers_cannot_load_stops_training_before_its_folder(tmp_path, tiny_model, train_data):
    """Weights shaped for another configuration, or no tokenizer: tracebacks from transformers, after the run
    had claimed its output folder."""
    wider = tmp_path / "wider"
    shutil.copytree(tiny_model, wider)
    config = json.loads((wider / "config.json").read_text())
    (wider / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))  # the weights' is 64
    recipe = sft_recipe(tmp_path / "r.yaml", wider, train_data, tmp_path / "sft", max_steps=1)
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1] == (
        f"error: {wider / 'model.safetensors'}: model.layers.0.mlp.down_proj.weight has shape [32, 64]; config.json "
        "makes it [32, 128]"
    )
    assert not (tmp_path / "sft").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, bare / name)
    with pytest.raises(DataError, match=re.escape(f"{bare}: holds no tokenizer (no tokenizer.json or tokenizer_")):
        fit_chat_template(str(bare), "chatml.jinja", None)  # checked though TRL gets a template


def test_a_max_length_past_a_learned_position_table_stops_before_the_folder(tmp_path, tiny_model, train_data):
    """GPT-2's positions are a table of n_positions rows: the first longer packed sequence was an IndexError,
    mid-run, after the run had claimed its folder."""
    gpt2 = gpt2_model(tmp_path / "gpt2", tiny_model, positions=64)
    recipe = sft_recipe(
        tmp_path / "r.yaml", gpt2, train_data, tmp_path / "sft", max_steps=1, max_length=128,
        lora_target_modules=["c_attn"],  # GPT-2's fused q, k, v projection
    )  # fmt: skip
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1] == (
        f"error: recipe key 'max_length': 128 passes the 64 learned positions of {gpt2}; give 64 or less"
    )
    assert not (tmp_path / "sft").exists()


def test_grpo_prompts_past_a_learned_position_table_stop_before_the_first_step(tmp_path, tiny_model, train_data):
    """TRL's GRPO has no prompt limit: a prompt with its max_completion_length new tokens past GPT-2's learned
    positions was an IndexError in the first rollout. The longest of the fixture's 9 prompts has 161 tokens."""
    from datasets import Dataset

    gpt2 = gpt2_model(tmp_path / "gpt2", tiny_model, positions=64)
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", gpt2, train_data / "train_rft.jsonl", tmp_path / "rft", lora_target_modules=["c_attn"]
    )
    trained = run_script("train/grpo.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1] == (
        "error: recipe key 'max_completion_length': 9 of 9 prompts with their 8 new tokens pass the 64 learned "
        f"positions of {gpt2} (the longest prompt has 161 tokens); lower max_completion_length, shorten the "
        "prompts, or use a model with a longer context"
    )
    assert not (tmp_path / "rft").exists()  # checked once the run held the folder it made: gone again
    prompts = Dataset.from_list(view_examples(train_data / "train_rft.jsonl"))
    check_prompts_fit(str(gpt2), (169, "learned positions"), 8, prompts, None)  # 161 + 8 fill the table exactly
    with pytest.raises(RecTuneError, match=re.escape("1 of 9 prompts with their 9 new tokens pass the 169 learned")):
        check_prompts_fit(str(gpt2), (169, "learned positions"), 9, None, prompts)
    check_prompts_fit(str(gpt2), None, 10**6, prompts)  # a configuration that names no positions: nothing to check
    # a rotary model's context: a release's megabyte prompt ran out of memory in the first rollout, blamed on the batch
    short = tmp_path / "short"
    shutil.copytree(tiny_model, short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    recipe = one_step_grpo_recipe(tmp_path / "s.yaml", short, train_data / "train_rft.jsonl", tmp_path / "rft")
    one_line(
        run_script("train/grpo.py", recipe, check=False),
        "recipe key 'max_completion_length': ",
        "prompts with their 8 new tokens pass the 128 context positions (max_position_embeddings) of ",
    )
    assert not (tmp_path / "rft").exists()


def test_a_run_whose_weights_stop_being_finite_stops_before_saving_them(tmp_path, tiny_model, train_data):
    """A learning rate of 3e38 turns the LoRA weights into NaN and inf in one step. transformers logged the NaN
    losses as 0 (its logging_nan_inf_filter), trained on, and saved, sealed and carded the NaN adapter as finished."""
    line = (
        "error: training diverged at step 1: the trained weights hold NaN or inf, and nothing of this step was saved; "
        "lower learning_rate (now 3e+38) or train in bf16 rather than fp16, then start again (another output_dir, or "
        "--overwrite to resume from its last checkpoint)"
    )
    sft = sft_recipe(tmp_path / "s.yaml", tiny_model, train_data, tmp_path / "sft", learning_rate=3e38)
    grpo = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft", learning_rate=3e38
    )
    for script, recipe, out in (("train/sft.py", sft, tmp_path / "sft"), ("train/grpo.py", grpo, tmp_path / "rft")):
        trained = run_script(script, recipe, check=False)
        assert trained.returncode == 2 and trained.stderr.splitlines()[-1] == line, trained.stderr[-2000:]
        assert not (out / "adapter_model.safetensors").exists() and not (out / "finished.json").exists()
        assert not list(out.glob("checkpoint-*"))


def assert_both_stop_before_training(tmp_path, model, train_data, line):
    """SFT and GRPO on ``model`` stop with ``line`` (exit 2), having saved no adapter or checkpoint."""
    sft = sft_recipe(tmp_path / "s.yaml", model, train_data, tmp_path / "sft")
    grpo = one_step_grpo_recipe(tmp_path / "g.yaml", model, train_data / "train_rft.jsonl", tmp_path / "rft")
    for script, recipe, out in (("train/sft.py", sft, tmp_path / "sft"), ("train/grpo.py", grpo, tmp_path / "rft")):
        trained = run_script(script, recipe, check=False)
        assert trained.returncode == 2 and trained.stderr.splitlines()[-1] == line, trained.stderr[-2000:]
        assert not (out / "adapter_model.safetensors").exists() and not list(out.glob("checkpoint-*"))


def test_a_model_holding_nan_before_training_is_named_not_blamed_on_the_learning_rate(tmp_path, tiny_model, train_data):
    """A stranger's checkpoint holding one NaN weight stopped as 'training diverged at step 1 ... lower
    learning_rate'; one whose attention_dropout is 3 (transformers loads it) raised a traceback at that step."""
    broken = tmp_path / "nan"
    shutil.copytree(tiny_model, broken)
    tensors = load_file(broken / "model.safetensors")
    tensors["model.layers.1.mlp.down_proj.weight"][0, 0] = float("nan")
    save_file(tensors, broken / "model.safetensors")
    line = (
        f"error: {broken}: its weight model.layers.1.mlp.down_proj.weight holds NaN or inf before any training step: "
        "a broken checkpoint, which no learning rate fixes"
    )
    assert_both_stop_before_training(tmp_path, broken, train_data, line)

    dropping = tmp_path / "dropout"
    shutil.copytree(tiny_model, dropping)
    config = json.loads((dropping / "config.json").read_text())
    (dropping / "config.json").write_text(json.dumps({**config, "attention_dropout": 3}))
    recipe = sft_recipe(tmp_path / "d.yaml", dropping, train_data, tmp_path / "d")
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1] == (
        f"error: {dropping / 'config.json'}: attention_dropout is 3: a dropout probability is a number from 0 to 1"
    )
    assert not (tmp_path / "d").exists()


def test_a_model_whose_configuration_computes_nan_is_named_not_blamed_on_the_learning_rate(
    tmp_path, tiny_model, train_data
):
    """A linear rotary scaling of factor 0 (no rule knows it) makes the rotary embedding NaN from finite weights: SFT
    and GRPO stopped as 'training diverged at step 1 ... lower learning_rate'. On an AVX-512 CPU, torch's attention
    kernel turns the NaN queries into zeros, so the logits were finite and only the first step's gradient was not:
    the forward before training names the first module computing NaN."""
    scaled = tmp_path / "scaled"
    shutil.copytree(tiny_model, scaled)
    config = json.loads((scaled / "config.json").read_text())
    rope = {"rope_theta": 10000.0, "rope_type": "linear", "factor": 0.0}
    (scaled / "config.json").write_text(json.dumps({**config, "rope_parameters": rope}))
    line = (
        f"error: {scaled}: its weights are finite but its model.rotary_emb computes NaN or inf before any training "
        "step (weights that overflow as they are multiplied, or a value in its config.json that breaks the "
        "computation): no learning rate fixes it"
    )
    assert_both_stop_before_training(tmp_path, scaled, train_data, line)


def test_weights_finite_looks_at_the_trained_parameters_only():
    layer = torch.nn.Linear(2, 2)
    assert weights_finite(layer)
    with torch.no_grad():
        layer.bias[0] = float("inf")
    assert not weights_finite(layer)
    layer.bias.requires_grad_(False)  # a frozen base weight is the model's own business after the first step
    assert weights_finite(layer)
    assert not weights_finite(layer, trained_only=False)  # ... and is looked at once, before it


def test_lora_target_modules_the_model_lacks_stop_before_the_folder(tmp_path, tiny_model, train_data):
    """PEFT's NoMatchingPeftModuleError was a traceback once TRL loaded the model, after the run had claimed its
    folder: a recipe written for Llama's names run on GPT-2's, say."""
    gpt2 = gpt2_model(tmp_path / "gpt2", tiny_model, positions=512)
    line = (
        f"error: recipe key 'lora_target_modules': ['q_proj', 'v_proj'] names none of {gpt2}'s modules (its linear "
        "ones: c_attn, c_fc, c_proj, lm_head)"
    )
    recipe = sft_recipe(tmp_path / "r.yaml", gpt2, train_data, tmp_path / "sft", max_steps=1)
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2 and trained.stderr.splitlines()[-1] == line, trained.stderr[-2000:]
    assert not (tmp_path / "sft").exists()
    recipe = one_step_grpo_recipe(tmp_path / "g.yaml", gpt2, train_data / "train_rft.jsonl", tmp_path / "rft")
    trained = run_script("train/grpo.py", recipe, check=False)
    assert trained.returncode == 2 and trained.stderr.splitlines()[-1] == line, trained.stderr[-2000:]
    assert not (tmp_path / "rft").exists()


def test_a_chat_template_path_trl_cannot_apply_is_one_line_before_the_folder(tmp_path, tiny_model, train_data):
    """TRL reads a .jinja or .j2 chat_template_path as the template, and anything else as a tokenizer to clone
    the template of: a syntax error, bytes that are no UTF-8 or a name no tokenizer loads from were tracebacks,
    after the run had claimed its folder."""
    good = tmp_path / "chatml.jinja"
    good.write_text(CHATML)
    check_chat_template_path(str(good), str(tiny_model))
    check_chat_template_path(str(tiny_model), str(tiny_model))  # a tokenizer whose template TRL clones
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }{% endfor %}")
    with pytest.raises(DataError) as caught:
        check_chat_template_path(str(broken), str(tiny_model))
    assert str(caught.value) == (
        f"{broken}: recipe key 'chat_template_path': no chat template {tiny_model}'s tokenizer can render: "
        "unexpected '}'"
    )
    latin = tmp_path / "latin.jinja"
    latin.write_bytes("{{ 'caf\u00e9' }}".encode("latin-1"))
    with pytest.raises(DataError, match="invalid continuation byte"):
        check_chat_template_path(str(latin), str(tiny_model))
    missing = tmp_path / "missing.jinja"
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, tmp_path / "sft", chat_template_path=str(missing))
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1].startswith(
        f"error: recipe key 'chat_template_path': '{missing}' is neither a .jinja or .j2 file nor a tokenizer that "
        "loads ("
    ), trained.stderr[-600:]
    assert not (tmp_path / "sft").exists()


def test_settings_trl_refuses_as_it_builds_its_trainer_are_one_line(tmp_path, tiny_model, train_data):
    """TRL checks some settings against one another as it builds its trainer: its ValueError was a traceback."""
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, tmp_path / "sft", max_steps=1, padding_free=True)
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1].startswith(
        "error: the trainer refuses these settings: When `padding_free=True` without packing, `max_length` is not "
        "enforced. Either enable packing"
    ), trained.stderr[-600:]
    # what TRL does not support yet is its NotImplementedError, a traceback once the model had loaded; here SFT
    # then RFT, whose merged SFT base, built in the run's folder before TRL refused, goes with the folder
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=2)).save_pretrained(tmp_path / "a")
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(tmp_path / "a")
    recipe = grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, tmp_path / "rft", sync_ref_model=True, beta=0.1)
    trained = run_script("train/grpo.py", recipe, "--init_adapter", tmp_path / "a", check=False)
    assert trained.returncode == 2 and trained.stderr.splitlines()[-1].startswith(
        "error: the trainer refuses these settings: You passed `sync_ref_model=True` while using a PEFT model"
    ), trained.stderr[-600:]
    assert not (tmp_path / "rft").exists()
    offloading = SimpleNamespace(activation_offloading=True, use_liger_kernel=False, use_cpu=False)
    if torch.cuda.is_available():
        check_kernels(offloading, SimpleNamespace(attn_implementation=None))
    else:  # it moves activations from a GPU: on a CPU, an AttributeError as training began
        with pytest.raises(RecTuneError, match="^activation_offloading moves activations from a GPU to the CPU: it "):
            check_kernels(offloading, SimpleNamespace(attn_implementation=None))


def test_use_vllm_without_vllm_stops_before_the_run_claims_its_folder(tmp_path, tiny_model, train_data, monkeypatch):
    """TRL refused it as it built its trainer: once the model had loaded, the run held its folder and W&B a run."""
    sampling = SimpleNamespace(use_vllm=True, use_cpu=True)
    installed, said = importlib.util.find_spec, "use_vllm needs the vllm package (pip install vllm), or use_vllm: false"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *_: None if name == "vllm" else installed(name))
    with pytest.raises(RecTuneError, match=f"^{re.escape(said)}$"):
        check_kernels(sampling, SimpleNamespace(attn_implementation=None))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *_: object() if name == "vllm" else installed(name))
    check_kernels(sampling, SimpleNamespace(attn_implementation=None))  # installed: left to TRL and vLLM
    if installed("vllm") is not None:
        return  # this machine has vLLM: nothing to refuse end to end
    out = tmp_path / "rft"
    trained = run_script("train/grpo.py", grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, out, use_vllm=True),
                         check=False)  # fmt: skip
    assert trained.returncode == 2 and trained.stderr.splitlines()[-1] == f"error: {said}", trained.stderr[-600:]
    assert not out.exists()


def test_sfts_special_tokens_must_be_the_tokenizers(tmp_path, tiny_model, train_data):
    """A recipe's eos_token or pad_token outside the vocabulary, and a tokenizer naming no end token, were TRL's
    ValueErrors: tracebacks."""
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, tmp_path / "sft", max_steps=1, pad_token="<nope>")
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2, trained.stderr[-2000:]
    assert trained.stderr.splitlines()[-1] == (
        f"error: recipe key 'pad_token': '<nope>' is no token of {tiny_model}'s tokenizer"
    )
    with pytest.raises(RecTuneError, match="recipe key 'eos_token': '<end>' is no token of "):
        fit_chat_template(str(tiny_model), None, None, eos_token="<end>")
    assert fit_chat_template(str(tiny_model), None, None, eos_token="<|im_end|>", pad_token="<pad>") == (None,)
    unnamed = tmp_path / "unnamed"
    shutil.copytree(tiny_model, unnamed)
    config = json.loads((unnamed / "tokenizer_config.json").read_text())
    config.pop("eos_token")
    (unnamed / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match=re.escape(f"{unnamed}: its tokenizer names no end-of-sequence token: add ")):
        fit_chat_template(str(unnamed), None, None)
    assert fit_chat_template(str(unnamed), None, None, eos_token="<|im_end|>") == (None,)  # SFT's eos_token names it


def test_training_a_model_without_a_chat_template_needs_one(tmp_path, tiny_model):
    base = model_with_template(tmp_path / "base", tiny_model, None)
    with pytest.raises(RecTuneError, match=r"its tokenizer has no chat template \(a base model\?\); give an "):
        fit_chat_template(str(base), None, None)
    assert fit_chat_template(str(base), "chatml.jinja", None) == (None,)  # TRL applies the one given
