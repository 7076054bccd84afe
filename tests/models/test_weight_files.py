"""A model folder is checked by the files transformers loads its weights from, chosen as it chooses them, and by
the weights it fills from them: a sharded folder's index named shards outside the folder (``/dev/zero`` filled
memory until the kernel killed the run), left some out (their weights started at random and evaluation exited 0)
or was no index (a traceback)."""

import json
import shutil

import pytest
import torch
from conftest import run_script
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, MixtralConfig

from rectune.core.io import DataError
from rectune.models.model_folders import check_model_folder
from rectune.models.weight_files import INDEX_NAME


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_model):
    """The tiny model saved in three shards and an index, its tokenizer beside them."""
    folder = tmp_path_factory.mktemp("sharded") / "model"
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(folder, max_shard_size="100KB")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model / name, folder / name)
    return folder


def with_index(folder, sharded, edit):
    """A copy of ``sharded`` whose index's weight map is ``edit(weight_map, first shard)``."""
    shutil.copytree(sharded, folder)
    index = json.loads((folder / INDEX_NAME).read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    index["weight_map"] = edit(index["weight_map"], first)
    (folder / INDEX_NAME).write_text(json.dumps(index))
    return folder


def moved(to):
    """A weight map edit: the first shard's weights named as held by ``to``."""
    return lambda weights, shard: {name: to if held == shard else held for name, held in weights.items()}


def refusal(folder, variant=None) -> str:
    with pytest.raises(DataError) as caught:
        check_model_folder(folder, variant)
    return str(caught.value)


def test_a_sharded_folder_is_checked_by_the_shards_its_index_names(tmp_path, sharded):
    assert len(list(sharded.glob("*.safetensors"))) == 3
    check_model_folder(sharded)

    def left_out(weights, first):
        return {name: held for name, held in weights.items() if held != first}

    partial = with_index(tmp_path / "partial", sharded, left_out)
    assert refusal(partial) == (
        f"{partial}: {INDEX_NAME}'s shards hold no lm_head.weight (1 of the LlamaForCausalLM's weights its "
        "config.json makes): transformers would start them at random"
    )
    _, loading = AutoModelForCausalLM.from_pretrained(partial, output_loading_info=True)
    assert loading["missing_keys"] == {"lm_head.weight"}  # what transformers does with it, without a word

    index = f"{tmp_path}/%s/{INDEX_NAME}: field 'weight_map': "
    for case, edit, problem in [
        ("zero", moved("/dev/zero"), "'/dev/zero' is not the name of a .safetensors file in the folder"),
        ("up", moved("../x.safetensors"), "'../x.safetensors' is not the name of a .safetensors file in the"),
        ("hidden", moved(".x.safetensors"), "'.x.safetensors' is not the name of a .safetensors file in the"),
        ("pickle", moved("model.bin"), "'model.bin' is not the name of a .safetensors file in the folder"),
        ("gone", moved("gone.safetensors"), "names gone.safetensors, which the folder does not hold"),
        ("listed", lambda weights, first: [first], "must map each weight's name to the file holding it"),
    ]:
        assert refusal(with_index(tmp_path / case, sharded, edit)).startswith(index % case + problem), case

    cut = with_index(tmp_path / "cut", sharded, lambda weights, first: weights)
    (cut / INDEX_NAME).write_text("{")
    assert refusal(cut).startswith(f"{cut / INDEX_NAME}:1: malformed JSON")


def test_a_shard_the_index_leaves_out_stops_evaluation(tmp_path, sharded, movie_data):
    partial = with_index(tmp_path / "partial", sharded, lambda w, first: {n: h for n, h in w.items() if h != first})
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    evaluated = run_script("evaluate/run.py", "--model", partial, "--out", tmp_path / "e", *args, check=False)
    assert evaluated.returncode == 2, evaluated.stderr[-2000:]  # it was 0, the output layer random
    assert evaluated.stderr.splitlines()[-1] == (
        f"error: {partial}: {INDEX_NAME}'s shards hold no lm_head.weight (1 of the LlamaForCausalLM's weights its "
        "config.json makes): transformers would start them at random"
    )
    assert not (tmp_path / "e").exists()


def test_weights_under_another_name_are_checked_where_transformers_looks(tmp_path, tiny_model):
    renamed = tmp_path / "renamed"
    shutil.copytree(tiny_model, renamed)
    (renamed / "model.safetensors").rename(renamed / "weights.safetensors")
    assert refusal(renamed) == (
        f"{renamed}: holds no model.safetensors, which transformers loads the weights from (its weights are named "
        "weights.safetensors)"
    )  # transformers' OSError was a traceback

    config = json.loads((renamed / "config.json").read_text())
    (renamed / "config.json").write_text(json.dumps({**config, "transformers_weights": "weights.safetensors"}))
    check_model_folder(renamed)
    AutoModelForCausalLM.from_pretrained(renamed)  # and transformers loads that file
    for named in ("pytorch_model.bin", "../weights.safetensors", 7):
        (renamed / "config.json").write_text(json.dumps({**config, "transformers_weights": named}))
        assert refusal(renamed) == (
            f"{renamed / 'config.json'}: transformers_weights is {str(named)!r}: it must name a .safetensors file "
            "(or its .index.json) in the folder"
        )

    variant = tmp_path / "variant"
    shutil.copytree(tiny_model, variant)
    shutil.copy(variant / "model.safetensors", variant / "model.fp16.safetensors")
    check_model_folder(variant, "fp16")
    (variant / "model.safetensors").unlink()
    check_model_folder(variant, "fp16")
    assert refusal(variant) == (
        f"{variant}: holds no model.safetensors, which transformers loads the weights from (its weights are named "
        "model.fp16.safetensors)"
    )


def test_weights_under_names_the_model_lacks_are_counted_as_transformers_loads_them(tmp_path, tiny_model):
    """A name the model lacks stopped the check of missing weights (it might be one transformers renames), so an
    output layer saved as ``lm_head.weight_old`` beside an older layout's ``rotary_emb.inv_freq`` started at
    random, and evaluation exited 0. transformers, loading on the meta device, now says what it would not fill."""
    odd = tmp_path / "odd"
    shutil.copytree(tiny_model, odd)
    tensors = load_file(odd / "model.safetensors")
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    tensors["lm_head.weight_old"] = tensors.pop("lm_head.weight")
    save_file(tensors, odd / "model.safetensors")
    assert refusal(odd) == (
        f"{odd}: holds no lm_head.weight (1 of the LlamaForCausalLM's weights its config.json makes): transformers "
        "would start them at random"
    )

    # Mixtral's per-expert weights, which transformers fuses as it loads: a whole folder passes, one without its
    # final norm is named, and one short of an expert's weight is transformers' refusal in one line
    mixtral = tmp_path / "mixtral"
    AutoModelForCausalLM.from_config(MixtralConfig(
        vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=2, num_experts_per_tok=1,
    )).save_pretrained(mixtral)  # fmt: skip
    tensors = load_file(mixtral / "model.safetensors")
    assert "model.layers.0.block_sparse_moe.experts.1.w2.weight" in tensors  # the names the model lacks
    check_model_folder(mixtral)
    save_file({name: t for name, t in tensors.items() if name != "model.norm.weight"}, mixtral / "model.safetensors")
    assert refusal(mixtral) == (
        f"{mixtral}: holds no model.norm.weight (1 of the MixtralForCausalLM's weights its config.json makes): "
        "transformers would start them at random"
    )
    del tensors["model.layers.0.block_sparse_moe.experts.1.w2.weight"]
    save_file(tensors, mixtral / "model.safetensors")
    assert refusal(mixtral).startswith(f"{mixtral}: transformers cannot load it: You set `ignore_mismatched_sizes`")
