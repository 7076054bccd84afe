"""A recipe's values of a type their field does not declare are one line naming the key: argparse converts only
strings, and took the rest as they were, into a TypeError or AttributeError in PEFT, TRL or RecTune's own checks."""

import pytest
from conftest import write_recipe
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, SFTConfig

from rectune.core.io import RecTuneError
from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.recipes import parse_recipe

SFT = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
GRPO = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments)

WRONG_TYPES = [
    ({"lora_dropout": [1]}, "key 'lora_dropout': [1] is not a number"),  # PEFT's TypeError
    ({"max_steps": {"a": 1}}, "key 'max_steps': {'a': 1} is not a whole number"),  # RecTune's range check's
    ({"lora_r": None}, "key 'lora_r': null is not a whole number"),
    ({"lora_r": 1e308}, "key 'lora_r': 1e+308 is not a whole number"),  # torch's, building the layer
    ({"lora_target_modules": False}, "key 'lora_target_modules': False is not a list of strings or null"),
    ({"lora_target_parameters": "x"}, "key 'lora_target_parameters': 'x' is not a list of strings or null (write [x])"),
    ({"optim_args": 7}, "key 'optim_args': 7 is not a string or null"),
    ({"model_name_or_path": 2.5}, "key 'model_name_or_path': 2.5 is not a string or null"),
    ({"chat_template_path": 2.5}, "key 'chat_template_path': 2.5 is not a string or null"),
    ({"model_init_kwargs": [{}]}, "key 'model_init_kwargs': [{}] is not a mapping or a string or null"),
    ({"model_init_kwargs": " "}, "key 'model_init_kwargs': ' ' is neither a mapping nor a JSON object's text"),
    ({"datasets": ["x"]}, "key 'datasets': ['x'] is not a list of mappings"),
    ({"accelerator_config": "-5"}, "No such file or directory: '-5'"),  # its string names a file: transformers'
]


@pytest.mark.parametrize(("values", "words"), WRONG_TYPES, ids=[str(v) for v, _ in WRONG_TYPES])
def test_a_value_of_another_type_is_one_line_naming_the_key(tmp_path, values, words):
    recipe = write_recipe(
        tmp_path / "r.yaml", **{"model_name_or_path": "m", "output_dir": str(tmp_path / "o"), **values}
    )
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(SFT, [str(recipe)])
    assert words in str(caught.value) and str(caught.value).startswith(str(recipe))


def test_what_the_libraries_take_beyond_the_declared_types_still_parses(tmp_path):
    """One pattern for PEFT's target modules, TRL's true for scale_rewards, a mapping's JSON text, numbers as
    strings (argparse converts them as it converts the command line's), and null where a field allows it."""
    values = {"model_name_or_path": "m", "output_dir": str(tmp_path / "out"), "lora_target_modules": "all-linear",
              "scale_rewards": True, "model_init_kwargs": '{"dtype": "float32"}', "learning_rate": "1e-4",
              "max_steps": 3, "warmup_steps": 0, "data_seed": None}  # fmt: skip
    parsed = parse_recipe(GRPO, [str(write_recipe(tmp_path / "r.yaml", **values))])
    training, model = parsed[0], parsed[1]
    assert (training.learning_rate, training.max_steps, training.scale_rewards) == (1e-4, 3, "group")
    assert model.lora_target_modules == "all-linear" and training.model_init_kwargs == {"dtype": "float32"}
