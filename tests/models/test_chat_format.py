"""RecTune's chats through a model's own tokenizer and chat template, including templates that take no system
message, and folders whose tokenizer is missing or cut."""

import json
import logging
import re
import resource
import shutil
import time

import pytest
from conftest import CHATML, GEMMA2_TEMPLATE, model_with_template, run_script
from transformers import AutoTokenizer

from rectune.core.io import DataError, RecTuneError
from rectune.core.memory_limit import address_space
from rectune.models import chat_format
from rectune.models.chat_format import fold_system, load_tokenizer, render_prompts, takes_system_messages

CHAT = [{"role": "system", "content": "You recommend films."}, {"role": "user", "content": "Something like Heat?"}]


@pytest.fixture
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_the_system_prompt_opens_the_first_user_message():
    assert fold_system(CHAT) == [{"role": "user", "content": "You recommend films.\n\nSomething like Heat?"}]
    answered = [*CHAT, {"role": "assistant", "content": "Ronin (1998)"}]
    assert fold_system(answered)[1:] == [{"role": "assistant", "content": "Ronin (1998)"}]
    assert fold_system(CHAT[1:]) == CHAT[1:]  # nothing to fold
    assert fold_system(CHAT[:1]) == [{"role": "user", "content": "You recommend films."}]


def test_a_template_without_system_messages_gets_them_folded_and_says_so(tokenizer, caplog):
    tokenizer.chat_template, tokenizer.bos_token = GEMMA2_TEMPLATE, "<|im_start|>"
    assert not takes_system_messages(tokenizer)
    with caplog.at_level(logging.WARNING, logger="rectune.models.chat_format"):
        texts = render_prompts(tokenizer, [CHAT, CHAT], "gemma")
    folded = "<|im_start|><start_of_turn>user\nYou recommend films.\n\nSomething like Heat?<end_of_turn>\n"
    assert texts == [folded + "<start_of_turn>model\n"] * 2
    assert caplog.messages == [
        "gemma: its chat template takes no system message; the system prompt opens the first user message"
    ]


def test_a_template_with_system_messages_renders_them_as_they_are(tokenizer, caplog):
    tokenizer.chat_template = CHATML
    assert takes_system_messages(tokenizer)
    with caplog.at_level(logging.WARNING, logger="rectune.models.chat_format"):
        texts = render_prompts(tokenizer, [CHAT], "chatml")
    assert texts == [
        "<|im_start|>system\nYou recommend films.<|im_end|>\n<|im_start|>user\nSomething like Heat?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ]
    assert caplog.messages == []


def test_no_template_or_a_template_refusing_the_prompt_is_one_line(tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(RecTuneError, match=r"^base: its tokenizer has no chat template \(a base model\?\)"):
        render_prompts(tokenizer, [CHAT], "base")
    tokenizer.chat_template = "{% if messages[-1]['content'] %}{{ raise_exception('English only') }}{% endif %}"
    with pytest.raises(RecTuneError, match=r"^odd: its chat template refuses RecTune's prompts: English only$"):
        render_prompts(tokenizer, [CHAT], "odd")


def test_a_folder_without_a_readable_tokenizer_is_one_line_wherever_it_is_loaded(tmp_path, tiny_model, movie_data):
    """Weights saved without their tokenizer, or a cut tokenizer.json: transformers' own error was a traceback
    in evaluation, in merging and in training (tests/training/test_training.py)."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, bare / name)
    holds_none = f"{bare}: holds no tokenizer (no tokenizer.json or tokenizer_config.json); copy the tokenizer"
    with pytest.raises(DataError, match=re.escape(holds_none)):
        load_tokenizer(str(bare))
    cut = tmp_path / "cut"
    shutil.copytree(tiny_model, cut)
    (cut / "tokenizer.json").write_text((tiny_model / "tokenizer.json").read_text()[:500])
    with pytest.raises(DataError, match=re.escape(f"{cut}: its tokenizer cannot be loaded: ")):
        load_tokenizer(str(cut))
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    result = run_script("evaluate/run.py", "--model", bare, "--out", tmp_path / "e", *args, check=False)
    assert result.returncode == 2 and result.stderr.splitlines()[-1].startswith(f"error: {holds_none}"), result.stderr
    assert not (tmp_path / "e").exists()


def test_a_tokenizer_limit_that_is_no_number_is_one_line(tmp_path, tiny_model):
    """A model_max_length of [{}] loaded, then every text tokenized was a TypeError comparing it with a length."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": [{}]}))
    with pytest.raises(
        DataError, match=re.escape(f"{folder}: its tokenizer_config.json sets model_max_length to [{{}}]")
    ):
        load_tokenizer(str(folder))
    assert load_tokenizer(str(tiny_model)).model_max_length > 0


def test_named_chat_templates_without_a_default_are_one_line(tmp_path, tiny_model, movie_data):
    """Templates in additional_chat_templates/ and none as chat_template.jinja: transformers' ValueError at the
    first prompt was a traceback."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    (folder / "additional_chat_templates").mkdir()
    (folder / "chat_template.jinja").rename(folder / "additional_chat_templates" / "tool_use.jinja")
    (folder / "additional_chat_templates" / "rag.jinja").write_text(CHATML)
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    evaluated = run_script("evaluate/run.py", "--model", folder, "--out", tmp_path / "e", *args, check=False)
    assert evaluated.returncode == 2 and not (tmp_path / "e").exists(), evaluated.stderr[-2000:]
    assert evaluated.stderr.splitlines()[-1] == (
        f"error: {folder}: its tokenizer has chat templates named rag, tool_use but no default one, which RecTune "
        "renders its prompts with (chat_template.jinja)"
    )
    (folder / "chat_template.jinja").write_text(CHATML)  # a default among named ones is the one rendered
    assert render_prompts(load_tokenizer(str(folder)), [[{"role": "user", "content": "Hi"}]], "m") == [
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ]


DOUBLING = (  # 2**64 characters asked for: a string doubled in a loop of 64
    "{% set ns = namespace(text='x') %}{% for i in range(64) %}{% set ns.text = ns.text ~ ns.text %}{% endfor %}"
    "{% for message in messages %}{{ message['content'] }}{% endfor %}"
)
ENDLESS = (  # 10**10 steps: Jinja's sandbox caps each range at 100,000, not loops inside loops
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{% for message in messages %}{{ message['content'] }}{% endfor %}"
)


def test_a_chat_template_that_loops_without_end_is_one_line(tokenizer, monkeypatch):
    monkeypatch.setattr(chat_format, "RENDER_TIME_S", 1.0)
    tokenizer.chat_template = ENDLESS
    started = time.monotonic()
    with pytest.raises(RecTuneError) as caught:
        render_prompts(tokenizer, [CHAT], "stranger/model")  # evaluation: the probe for system messages first
    assert str(caught.value) == (
        f"{tokenizer.name_or_path}: its chat template ran past 1 s on one chat (a loop without end?)"
    )
    monkeypatch.setattr(chat_format, "takes_system_messages", lambda tokenizer, options=None: True)
    with pytest.raises(RecTuneError) as caught:
        render_prompts(tokenizer, [CHAT], "stranger/model")  # a template looping on RecTune's prompts only
    assert str(caught.value) == "stranger/model: its chat template ran past 1 s on one chat (a loop without end?)"
    assert time.monotonic() - started < 20
    tokenizer.chat_template = CHATML
    assert render_prompts(tokenizer, [CHAT], "m") == [
        "<|im_start|>system\nYou recommend films.<|im_end|>\n<|im_start|>user\nSomething like Heat?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ]


@pytest.mark.skipif(address_space() is None, reason="the platform does not say what a process holds")
def test_a_chat_template_that_builds_without_bound_is_one_line_and_leaves_no_cap(tokenizer, monkeypatch):
    monkeypatch.setattr(chat_format, "RENDER_MEMORY_MIB", 64)
    tokenizer.chat_template = DOUBLING
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(RecTuneError) as caught:
        render_prompts(tokenizer, [CHAT], "stranger/model")
    assert str(caught.value) == (
        f"{tokenizer.name_or_path}: its chat template asked for more than 64 MiB on one chat (a string or list "
        "built without bound?)"
    )
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    tokenizer.chat_template = CHATML
    assert render_prompts(tokenizer, [CHAT], "m")[0].startswith("<|im_start|>system\nYou recommend films.")


ANSWER_BOMB = (  # renders the probe's system and user messages; builds without bound on an assistant's answer only
    "{% for message in messages %}{% if message['role'] == 'assistant' %}{% set ns = namespace(text='x') %}"
    "{% for i in range(64) %}{% set ns.text = ns.text ~ ns.text %}{% endfor %}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
REFUSES_RONIN = (  # refuses one example's text, as a template may refuse what it cannot render
    "{% for message in messages %}{% if 'Ronin' in message['content'] %}{{ raise_exception('no Ronin') }}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
)


@pytest.mark.skipif(address_space() is None, reason="the platform does not say what a process holds")
def test_training_examples_are_rendered_under_the_limits_before_trl_renders_them(tmp_path, tiny_model, monkeypatch):
    """TRL renders the training data without limits: a template misbehaving only on examples (not on the probe's
    chat) ended in the OOM killer or a traceback."""
    from datasets import Dataset

    from rectune.training.views import fit_chat_template

    monkeypatch.setattr(chat_format, "RENDER_MEMORY_MIB", 64)
    answered = Dataset.from_list([
        {"prompt": CHAT, "completion": [{"role": "assistant", "content": "Heat (1995)"}]},
        {"prompt": CHAT, "completion": [{"role": "assistant", "content": "Ronin (1998)"}]},
    ])  # fmt: skip
    bomb = model_with_template(tmp_path / "bomb", tiny_model, ANSWER_BOMB)
    assert fit_chat_template(str(bomb), None, answered.select_columns(["prompt"]))  # prompts alone render
    plain = Dataset.from_list([{"prompt": "Heat (1995)", "completion": " Ronin (1998)"}])
    assert fit_chat_template(str(bomb), None, plain)  # plain text: TRL renders it with no template
    with pytest.raises(RecTuneError) as caught:
        fit_chat_template(str(bomb), None, answered)
    assert str(caught.value) == (
        f"training example 1: {bomb}: its chat template asked for more than 64 MiB on one chat (a string or list "
        "built without bound?)"
    )
    refusing = model_with_template(tmp_path / "refusing", tiny_model, REFUSES_RONIN)
    with pytest.raises(RecTuneError) as caught:
        fit_chat_template(str(refusing), None, answered, answered.select(range(1)))
    assert str(caught.value) == f"{refusing}: its chat template refuses training example 2: no Ronin"
    with pytest.raises(RecTuneError, match="refuses validation example 1: no Ronin"):
        fit_chat_template(str(refusing), None, answered.select(range(1)), answered.select(range(1, 2)))
    given = tmp_path / "bomb.jinja"  # SFT's chat_template_path: TRL applies it instead of the model's
    given.write_text(ANSWER_BOMB)
    with pytest.raises(RecTuneError, match=re.escape(f"training example 1: {given}: its chat template asked for more")):
        fit_chat_template(str(tiny_model), str(given), answered)
    with pytest.raises(RecTuneError, match=re.escape(f"training example 1: {bomb}: its chat template asked for more")):
        fit_chat_template(str(tiny_model), str(bomb), answered)  # a tokenizer's folder: TRL clones its template
