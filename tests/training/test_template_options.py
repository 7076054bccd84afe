"""A chat template's variables (``chat_template_kwargs``) go from GRPO's recipe to TRL's renderings, RecTune's
checks of them, the saved stage and its evaluation, local or served; ``apply_chat_template``'s own parameters
are refused; and SFT says in one line when a template renders a prompt alone unlike the prompt with its answer."""

import argparse
import datetime
import json
import logging

import pytest
from conftest import CHATML, model_with_template, one_step_grpo_recipe, run_script
from test_endpoint import free_port, start_server, stop_server

from rectune.core.io import DataError
from rectune.evaluation.endpoint import request_body
from rectune.evaluation.reports import predictions_key
from rectune.models.chat_format import check_examples_render, load_tokenizer
from rectune.models.checkpoints import Checkpoint
from rectune.models.generation import GenerationSettings
from rectune.models.template_options import (
    TEMPLATE_OPTIONS_FILE,
    recorded_template_options,
    template_options_argument,
    template_options_problem,
)

# CHATML that refuses to begin an answer unless told how brief to be: rendered without the variable, it raises
NEEDS_BRIEF = CHATML.replace(
    "<|im_start|>assistant\n{% endif %}",
    "<|im_start|>assistant\n{% if brief is not defined %}{{ raise_exception('say how brief') }}{% endif %}"
    "{% if brief %}(briefly) {% endif %}{% endif %}",
)
# A template that opens a thought for the answer to come, but renders a given answer without it (as
# DeepSeek-R1's distilled models' templates do)
THINKS_FIRST = CHATML.replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>\n{% endif %}")
PROMPT = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"tokenize": True}, "'tokenize' is a parameter of apply_chat_template itself"),
        ({"add_generation_prompt": False}, "'add_generation_prompt' is a parameter"),
        ({"chat_template": "{{ 1 }}"}, "'chat_template' is a parameter"),
        ({"a b": 1}, "'a b' is no name a template can read"),
        ([1], "a list, not a mapping"),
        ("[1]", "'[1]' is no JSON object"),
        ({"when": datetime.date(2026, 1, 1)}, "not JSON"),
    ],
)
def test_what_cannot_be_a_templates_variables_is_named(value, words):
    assert words in template_options_problem(value)


def test_a_templates_variables_are_taken():
    assert template_options_problem(None) is None
    assert template_options_problem({"enable_thinking": False, "tools_hint": ["a", 1]}) is None
    assert template_options_argument('{"enable_thinking": false}') == {"enable_thinking": False}
    with pytest.raises(argparse.ArgumentTypeError, match="'enable_thinking' is no JSON object"):
        template_options_argument("enable_thinking")
    with pytest.raises(argparse.ArgumentTypeError, match="'tokenize' is a parameter"):
        template_options_argument('{"tokenize": true}')
    with pytest.raises(argparse.ArgumentTypeError, match="not JSON"):
        template_options_argument('{"x": NaN}')


def test_a_saved_file_of_another_shape_is_one_line_naming_it(tmp_path):
    assert recorded_template_options(tmp_path) == {} and recorded_template_options(None) == {}
    (tmp_path / TEMPLATE_OPTIONS_FILE).write_text('{"chat_template": "{{ 1 }}"}')
    with pytest.raises(DataError, match=f"{TEMPLATE_OPTIONS_FILE}.*'chat_template' is a parameter"):
        recorded_template_options(tmp_path)
    (tmp_path / TEMPLATE_OPTIONS_FILE).write_text("[]")
    with pytest.raises(DataError, match="expected a JSON object"):
        recorded_template_options(tmp_path)


def test_requests_carry_the_variables_and_reports_without_them_keep_their_key():
    settings = GenerationSettings(chat_template_kwargs={"enable_thinking": False})
    assert request_body(PROMPT, "m", settings)["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in request_body(PROMPT, "m", GenerationSettings())
    model = Checkpoint("model", "m", "m")
    plain = predictions_key(model, __file__, {}, GenerationSettings())["generation"]
    assert set(plain) == {"max_new_tokens", "do_sample", "temperature", "top_p", "seed"}
    given = predictions_key(model, __file__, {}, settings)["generation"]
    assert given["chat_template_kwargs"] == {"enable_thinking": False}


def test_a_recipe_passing_the_renderers_own_parameters_is_refused_before_anything_loads(tmp_path, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tmp_path / "no-model", train_data / "train_rft.jsonl", tmp_path / "rft",
        chat_template_kwargs={"add_generation_prompt": False},
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe, check=False)
    assert result.returncode == 2 and not (tmp_path / "rft").exists()
    assert "key 'chat_template_kwargs': 'add_generation_prompt' is a parameter" in result.stderr
    assert "Traceback" not in result.stderr


def test_sft_says_when_a_prompt_renders_unlike_the_prompt_with_its_answer(tiny_model, tmp_path, caplog):
    examples = [{"prompt": PROMPT, "completion": [{"role": "assistant", "content": "Heat"}]}]
    check_examples_render(load_tokenizer(str(tiny_model)), examples, "tiny", "training")
    assert not caplog.records
    thinking = load_tokenizer(str(model_with_template(tmp_path / "thinks", tiny_model, THINKS_FIRST)))
    with caplog.at_level(logging.WARNING):
        check_examples_render(thinking, examples * 2, "thinks", "training")
    (record,) = caplog.records
    assert "(training example 1 first): training leaves out '<think>\\n'" in record.getMessage()


def test_grpo_renders_with_the_recipes_variables_and_evaluation_with_the_stages(tmp_path, tiny_model, train_data):
    model = model_with_template(tmp_path / "brief", tiny_model, NEEDS_BRIEF)
    data, out = train_data / "train_rft.jsonl", tmp_path / "rft"
    refused = run_script("train/grpo.py", one_step_grpo_recipe(tmp_path / "a.yaml", model, data, out), check=False)
    assert refused.returncode == 2 and "its chat template refuses training example 1: say how brief" in refused.stderr
    recipe = one_step_grpo_recipe(tmp_path / "b.yaml", model, data, out, chat_template_kwargs={"brief": True},
                                  save_steps=1)  # fmt: skip
    run_script("train/grpo.py", recipe)
    assert json.loads((out / TEMPLATE_OPTIONS_FILE).read_text()) == {"brief": True}
    # a checkpoint carries them too: evaluated, it rendered its prompts without them (here: refused to)
    assert json.loads((out / "checkpoint-1" / TEMPLATE_OPTIONS_FILE).read_text()) == {"brief": True}
    assert json.loads((out / "finished.json").read_text())["chat_template_kwargs"] == {"brief": True}

    test = train_data / "train.jsonl"
    flags = ["--data", test, "--limit", "2", "--max-new-tokens", "4", "--no-wandb"]
    scored = run_script("evaluate/run.py", "--model", out, "--out", tmp_path / "eval", *flags)
    assert "with the chat_template_kwargs" in scored.stdout and "{'brief': True}" in scored.stdout
    config = json.loads((tmp_path / "eval" / "config.json").read_text())
    assert config["generation"]["chat_template_kwargs"] == {"brief": True}
    assert config["predictions_key"]["generation"]["chat_template_kwargs"] == {"brief": True}
    run_script("evaluate/run.py", "--model", out / "checkpoint-1", "--out", tmp_path / "eval_checkpoint", *flags)
    other = run_script("evaluate/run.py", "--model", out, "--out", tmp_path / "e2", "--chat-template-kwargs", "{}",
                       *flags, check=False)  # fmt: skip
    assert other.returncode == 2 and "refuses RecTune's prompts: say how brief" in other.stderr


def test_a_served_model_renders_with_the_variables_given(tmp_path, tiny_model, train_data, monkeypatch):
    model = model_with_template(tmp_path / "brief", tiny_model, NEEDS_BRIEF)
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    port = free_port()
    server = start_server(model, port)
    try:
        run_script(
            "evaluate/run.py", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--api-model",
            str(model), "--data", train_data / "train.jsonl", "--out", tmp_path / "served", "--limit", "2",
            "--max-new-tokens", "4", "--no-wandb", "--chat-template-kwargs", '{"brief": true}', "--max-retries", "0",
        )  # fmt: skip
    finally:
        stop_server(server)
    assert len((tmp_path / "served" / "predictions.jsonl").read_text().splitlines()) == 2
