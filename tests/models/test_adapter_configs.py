"""Adapter configurations from elsewhere: what PEFT cannot read, apply, load or merge is one line naming
``adapter_config.json`` (each was PEFT's TypeError, KeyError, ValueError, AttributeError or NotImplementedError)."""

import json
import re
import shutil

import pytest
import torch

from rectune.core.io import DataError
from rectune.models.checkpoints import adapter_chain, check_adapters_fit, load_merged
from rectune.training.merging import merge_adapters


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        ({"r": "8"}, "PEFT cannot apply it to {base}: '<=' not supported between instances of 'str' and 'int'"),
        ({"lora_alpha": None}, "PEFT cannot apply it to {base}: unsupported operand type(s) for /"),
        ({"r": -1}, "PEFT cannot apply it to {base}: `r` should be a positive integer value"),
        ({"peft_type": "NOPE"}, "field 'peft_type': 'NOPE' is no adapter type PEFT knows"),
        ({"task_type": "WHAT"}, "PEFT cannot read it: Invalid task type: 'WHAT'"),
        ({"init_lora_weights": 7}, "field 'init_lora_weights': must be true, false or the name of a PEFT init"),
        ({"init_lora_weights": "x"}, "field 'init_lora_weights': must be true, false or the name of a PEFT init"),
        ({"init_lora_weights": "PISSA"}, "field 'init_lora_weights': must be true, false or the name of a PEFT init"),
    ],
)
def test_an_adapter_config_peft_cannot_use_is_one_line(tmp_path, tiny_model, adapters, setting, line):
    """Each was PEFT's TypeError, KeyError or ValueError, a traceback; r -1 was said not to fit the model."""
    adapter = tmp_path / "adapter"
    shutil.copytree(adapters[0], adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, **setting}))
    with pytest.raises(DataError) as caught:
        check_adapters_fit(str(tiny_model), [str(adapter)])
    assert str(caught.value).startswith(f"{adapter / 'adapter_config.json'}: {line.format(base=tiny_model)}")


@pytest.mark.parametrize("name", ["gaussian", "pissa", "pissa_niter_4", "olora", "eva", "orthogonal"])
def test_peft_initialisations_by_name_are_taken(tmp_path, tiny_model, adapters, name):
    adapter = tmp_path / "adapter"
    shutil.copytree(adapters[0], adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "init_lora_weights": name}))
    check_adapters_fit(str(tiny_model), [str(adapter)])


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        ({"monteclora_config": -1}, "/adapter_config.json: PEFT cannot load it onto {base}: 'int' object has no"),
        ({"alora_invocation_tokens": [1]}, ": PEFT cannot merge it into {base}: aLoRA does not support merging"),
    ],
)
def test_an_adapter_peft_refuses_only_as_it_loads_or_merges_is_one_line(tmp_path, tiny_model, adapters, setting, line):
    """Settings PEFT reads only as it builds the layers or merges them: an AttributeError, a ValueError or a
    NotImplementedError, a traceback, in evaluation, in SFT→RFT's merged base and in train/merge.py."""
    adapter = tmp_path / "adapter"
    shutil.copytree(adapters[0], adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, **setting}))
    with pytest.raises(DataError) as caught:
        load_merged(str(tiny_model), [str(adapter)], torch.float32)
    assert str(caught.value).startswith(f"{adapter}{line.format(base=tiny_model)}"), str(caught.value)
    merging = line.split(": ", 1)[1].format(base=tiny_model)
    if "aLoRA" in line:  # a weighted merge refuses it before PEFT would merge it as a plain LoRA adapter
        merging = "an aLoRA adapter: it acts only after its invocation tokens, which a merge drops"
    with pytest.raises(DataError, match=re.escape(merging)):
        merge_adapters([str(adapters[0]), str(adapter)], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_an_adapter_config_naming_no_base_model_is_one_line(tmp_path, adapters):
    adapter = tmp_path / "adapter"
    shutil.copytree(adapters[0], adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    for content, line in [
        ([config], "expected a JSON object, got list"),  # was an AttributeError
        (
            {**config, "base_model_name_or_path": 5},
            "field 'base_model_name_or_path': must name the base model (a string), got 5",
        ),  # was a TypeError  # fmt: skip
    ]:
        (adapter / "adapter_config.json").write_text(json.dumps(content))
        with pytest.raises(DataError, match=re.escape(f"{adapter / 'adapter_config.json'}: {line}")):
            adapter_chain(adapter)


def test_a_base_chain_file_of_another_shape_is_one_line(tmp_path, adapters):
    """A list in base_chain.json (which names what a portable adapter was trained on) was an AttributeError, and
    folders in it that are no strings a TypeError."""
    from rectune.models.sharing import CHAIN

    adapter = tmp_path / "adapter"
    shutil.copytree(adapters[0], adapter)
    (adapter / CHAIN).write_text("[]")
    with pytest.raises(DataError, match=re.escape(f"{adapter / CHAIN}: expected a JSON object, got list")):
        adapter_chain(adapter)
    # folders that are no strings were a TypeError as each was joined to the adapter's folder
    (adapter / CHAIN).write_text(json.dumps({"base_model": "org/base", "merged_adapters": ["../sft", 1, None]}))
    line = "field 'merged_adapters': must list folders (strings), got ['../sft', 1, None]"
    with pytest.raises(DataError, match=re.escape(f"{adapter / CHAIN}: {line}")):
        adapter_chain(adapter)
    for hashes in ("abc", ["abc"], [1, 2]):  # one SHA-256 per merged adapter, or none recorded
        (adapter / CHAIN).write_text(json.dumps({"base_model": "org/base", "merged_adapters": ["a", "b"],
                                                 "merged_sha256": hashes}))  # fmt: skip
        line = "field 'merged_sha256': must list one SHA-256 (a string) per merged adapter"
        with pytest.raises(DataError, match=re.escape(f"{adapter / CHAIN}: {line}")):
            adapter_chain(adapter)
