"""Runs are never silently mixed: resuming a training run with another recipe or data is refused in one
line (the first differing key named) unless --overwrite, and an evaluation's cache follows a local model
folder's content, not its path."""

import json
import shutil

import pytest
import torch
from conftest import run_script, write_recipe
from safetensors.torch import load_file, save_file
from test_faults import KILLED
from test_hostile import one_line

from rectune.core.io import RecTuneError
from rectune.models.checkpoints import Checkpoint
from rectune.models.sharing import make_portable
from rectune.training.stages import check_resume


def two_step_recipe(tmp_path, tiny_model, data_file, out, **extra):
    return write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(out), max_steps=2, save_steps=1,
        report_to=["none"], use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"],
        learning_rate=1e-4, datasets=[{"path": "json", "data_files": str(data_file)}], **extra,
    )  # fmt: skip


def test_a_resume_with_another_recipe_data_or_base_model_is_refused(tmp_path, tiny_model, train_data):
    out, data, model = tmp_path / "run", tmp_path / "data", tmp_path / "model"
    shutil.copytree(train_data, data)
    shutil.copytree(tiny_model, model)
    recipe = two_step_recipe(tmp_path, model, data / "train_sft.jsonl", out)  # a view of train.jsonl
    assert run_script("train/sft.py", recipe, fault="saved:checkpoint-1", check=False).returncode == KILLED
    assert json.loads((out / "started.json").read_text())["recipe"]["learning_rate"] == 1e-4

    # another learning rate, another LoRA rank: refused, nothing trained
    changes = [(["--learning_rate", "1e-3"], "'learning_rate' (0.0001, now 0.001)"), (["--lora_r", "8"], "'lora_r'")]
    for flags, key in changes:
        one_line(run_script("train/sft.py", recipe, *flags, check=False), str(out), f"recipe key {key}", "--overwrite")
        assert not (out / "finished.json").exists() and not (out / "checkpoint-2").exists()

    # the same recipe over edited data: refused
    rows = (data / "train.jsonl").read_text()
    (data / "train.jsonl").write_text(rows.splitlines(keepends=True)[0])
    one_line(run_script("train/sft.py", recipe, check=False), "training data")
    (data / "train.jsonl").write_text(rows)

    # the base model's folder rewritten in place (another model saved there): the same path, other weights
    weights = model / "model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:-4] + bytes(4))
    one_line(run_script("train/sft.py", recipe, check=False), "another base model (its files were rewritten")
    assert not (out / "checkpoint-2").exists()
    weights.write_bytes(original)  # the same bytes again, with a new time: hashed again, and the same model

    # the same recipe and data: resumes and finishes; recipe.yaml names the one recipe the run had
    assert run_script("train/sft.py", recipe, check=False).returncode == 0
    assert (out / "finished.json").exists() and "learning_rate: 0.0001" in (out / "recipe.yaml").read_text()


def test_a_named_checkpoint_of_another_adapter_or_cut_short_is_one_line_before_the_folder(
    tmp_path, tiny_model, train_data
):
    """resume_from_checkpoint naming another run's checkpoint: another rank was PEFT's state-dict traceback, other
    target modules the optimizer's, another lora_alpha trained on silently with the adapter scaled otherwise, and
    one trained over another SFT adapter (or none) went on over this run's base, silently."""
    first = tmp_path / "first"
    run_script("train/sft.py", two_step_recipe(tmp_path, tiny_model, train_data / "train_sft.jsonl", first))
    named = first / "checkpoint-1"
    recipe = two_step_recipe(tmp_path, tiny_model, train_data / "train_sft.jsonl", tmp_path / "second")
    for flags, words in (
        (["--lora_r", "8"], "its adapter has r 4, this run's lora_r is 8"),
        (["--lora_alpha", "16"], "its adapter has lora_alpha 8, this run's lora_alpha is 16"),
        (
            ["--lora_target_modules", "q_proj", "k_proj", "v_proj"],
            "target_modules ['q_proj', 'v_proj'], this run's lora_target_modules is ['k_proj', ",
        ),
    ):
        result = run_script("train/sft.py", recipe, "--resume_from_checkpoint", named, *flags, check=False)
        assert words in one_line(result, f"resume_from_checkpoint {named}: its adapter has ")
        assert not (tmp_path / "second").exists()
    cut = tmp_path / "cut"
    shutil.copytree(named, cut)
    (cut / "trainer_state.json").unlink()  # a copy interrupted while it was made
    one_line(run_script("train/sft.py", recipe, "--resume_from_checkpoint", cut, check=False),
             f"resume_from_checkpoint {cut}: no trainer_state.json")  # fmt: skip
    wider = tmp_path / "wider"  # as trained on a model twice as wide (lora_A of q_proj: 4 x 64, not 4 x 32)
    shutil.copytree(named, wider)
    tensors = load_file(wider / "adapter_model.safetensors")
    tensors = {name: torch.zeros(4, 64) if "q_proj.lora_A" in name else t for name, t in tensors.items()}
    save_file(tensors, wider / "adapter_model.safetensors")
    one_line(run_script("train/sft.py", recipe, "--resume_from_checkpoint", wider, check=False),
             "adapter_model.safetensors: ", "[4, 64]")  # fmt: skip
    assert not (tmp_path / "second").exists()
    chained = tmp_path / "chained"  # a checkpoint of an SFT then RFT run over the first run's adapter
    shutil.copytree(named, chained)
    make_portable(chained, str(tiny_model), str(first))
    one_line(run_script("train/sft.py", recipe, "--resume_from_checkpoint", chained, check=False),
             f"resume_from_checkpoint {chained}: it was trained over SFT adapter {first}, this run trains over "
             "the base model alone; resume from a checkpoint of this stage")  # fmt: skip
    assert not (tmp_path / "second").exists()
    resumed = run_script("train/sft.py", recipe, "--resume_from_checkpoint", cut.parent / "first/checkpoint-1")
    assert "saved the SFT adapter" in resumed.stdout + resumed.stderr
    assert json.loads((tmp_path / "second" / "finished.json").read_text())["global_step"] == 2
    # the finished stage is not trained again, so the checkpoint it resumed from may since have gone
    shutil.rmtree(cut.parent / "first/checkpoint-1")
    again = run_script("train/sft.py", recipe, "--resume_from_checkpoint", cut.parent / "first/checkpoint-1")
    assert "the sft stage finished at step 2; nothing to do" in again.stdout


def test_a_resume_may_change_how_fast_it_samples_not_what_it_trains(tmp_path):
    checkpoint = tmp_path / "checkpoint-1"  # a complete checkpoint: the run resumes
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text('{"global_step": 1}')
    save_file({"w": torch.zeros(2)}, checkpoint / "adapter_model.safetensors")
    started = {"learning_rate": 1e-4, "compile_rollouts": False, "logging_steps": 1}
    check_resume(tmp_path, started, [], overwrite=False)  # the first start records the recipe
    check_resume(tmp_path, {**started, "compile_rollouts": True, "logging_steps": 5}, [], overwrite=False)
    with pytest.raises(RecTuneError, match=r"recipe key 'learning_rate' \(0.0001, now 0.001\)"):
        check_resume(tmp_path, {**started, "compile_rollouts": True, "learning_rate": 1e-3}, [], overwrite=False)
    # SFT then RFT over an SFT adapter retrained in its own folder: the same path, another base under the checkpoints
    sft, chained = tmp_path / "sft", tmp_path / "sft_rft"
    sft.mkdir()
    (sft / "adapter_config.json").write_text("{}")
    save_file({"w": torch.zeros(2)}, sft / "adapter_model.safetensors")
    shutil.copytree(checkpoint, chained / "checkpoint-1")
    for _ in range(2):  # the first start records it; a resume over the same adapter goes on
        check_resume(chained, started, [], overwrite=False, sft_adapter=str(sft))
    save_file({"w": torch.ones(2)}, sft / "adapter_model.safetensors")
    with pytest.raises(RecTuneError, match=r"another SFT adapter \(init_adapter was retrained or replaced since\)"):
        check_resume(chained, started, [], overwrite=False, sft_adapter=str(sft))
    # GRPO over a KG rewritten in place (data_prep rerun with more triples, the rows the same): other rewards
    kg, rewarded = tmp_path / "kg.jsonl", tmp_path / "rft"
    kg.write_text('{"item": "Heat", "relation": "Genre", "value": "Crime"}\n')
    shutil.copytree(checkpoint, rewarded / "checkpoint-1")
    for _ in range(2):
        check_resume(rewarded, started, [], overwrite=False, reward_files=[kg])
    kg.write_text('{"item": "Heat", "relation": "Genre", "value": "Thriller"}\n')
    with pytest.raises(RecTuneError, match=r"another catalog or KG for the rewards \(a file's content"):
        check_resume(rewarded, started, [], overwrite=False, reward_files=[kg])


def test_overwrite_resumes_with_the_new_recipe_and_says_so(tmp_path, tiny_model, train_data):
    out = tmp_path / "run"
    recipe = two_step_recipe(tmp_path, tiny_model, train_data / "train_sft.jsonl", out)
    assert run_script("train/sft.py", recipe, fault="saved:checkpoint-1", check=False).returncode == KILLED
    result = run_script("train/sft.py", recipe, "--learning_rate", "1e-3", "--overwrite", check=False)
    assert result.returncode == 0 and "resuming with another recipe key 'learning_rate'" in result.stderr
    assert json.loads((out / "started.json").read_text())["recipe"]["learning_rate"] == 1e-3


def test_a_model_folder_rewritten_in_place_is_another_model(tmp_path, tiny_model):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    checkpoint = Checkpoint(kind="model", path=str(folder), base_model=str(folder))
    before = checkpoint.identity()
    (folder / "README.md").write_text("a card edited")  # not what decides the outputs
    assert checkpoint.identity() == before and str(folder) not in before
    weights = next(p for p in folder.iterdir() if p.suffix == ".safetensors")
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight, as a merge written in place changes them
    weights.write_bytes(bytes(data))
    assert checkpoint.identity() != before
