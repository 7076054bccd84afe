"""RecTune's chats through a model's own chat template, including templates that take no system message."""

import logging

import pytest
from conftest import CHATML, GEMMA2_TEMPLATE
from transformers import AutoTokenizer

from rectune.core.io import RecTuneError
from rectune.models.chat_format import fold_system, render_prompts, takes_system_messages

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
