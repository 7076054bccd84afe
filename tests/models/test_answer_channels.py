"""An answer whose reasoning is marked by special tokens (gpt-oss, Gemma 4) is its answer, not the reasoning glued
to it."""

import pytest

from rectune.models.answer_channels import decoded_answers, reasoning_template, uses_channels

HARMONY = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|endoftext|>"]


def byte_level_tokenizer(specials: list[str], eos: str, pad: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = ["We need thrillers. Heat fits, Jaws does not.", "assistant final analysis Heat [SEP] Ronin"] * 5
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token=pad, eos_token=eos)


@pytest.fixture(scope="module")
def harmony():
    return byte_level_tokenizer(HARMONY, eos="<|return|>", pad="<|endoftext|>")


def answers(tokenizer, texts, prompts=None, model_type=None):
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    return decoded_answers(tokenizer, ids, prompts, model_type)


def test_the_final_channels_message_is_the_answer(harmony):
    reasoning = "<|channel|>analysis<|message|>We need thrillers. Jaws does not fit.<|end|>"
    texts = [
        f"{reasoning}<|start|>assistant<|channel|>final<|message|>Heat [SEP] Ronin<|return|>",
        f"{reasoning}<|start|>assistant<|channel|>final<|message|>Heat<|return|><|endoftext|><|endoftext|>",  # padded
        "<|channel|>analysis<|message|>We need thrillers. Heat fits",  # cut short while reasoning: no answer
        "Heat [SEP] Ronin<|return|>",  # no channels written: read as any answer
    ]
    assert uses_channels(harmony)
    assert answers(harmony, texts) == ["Heat [SEP] Ronin", "Heat", "", "Heat [SEP] Ronin"]
    # what decoding without special tokens made of the first: the reasoning scored, the title glued on
    assert harmony.decode(harmony(texts[0])["input_ids"], skip_special_tokens=True).startswith("analysisWe need")


GEMMA4 = ["<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<eos>",
          "<pad>"]  # fmt: skip


def test_gemma4s_thought_channel_is_left_out_by_transformers_template():
    gemma = byte_level_tokenizer(GEMMA4, eos="<eos>", pad="<pad>")
    assert reasoning_template(gemma, "gemma4") is not None  # the template transformers keeps for its model type
    prompt = "<|turn>user\nRecommend thrillers.<turn|>\n<|turn>model\n"
    texts = [
        "<|channel>thought\nWe need thrillers. Jaws no.<channel|>Heat [SEP] Ronin<turn|><pad><pad>",  # padded
        "<|channel>thought\nWe need thrillers",  # cut short while reasoning: no answer
        "Heat [SEP] Ronin<turn|>",  # no thought written
    ]
    assert answers(gemma, texts, [prompt] * 3, "gemma4") == ["Heat [SEP] Ronin", "", "Heat [SEP] Ronin"]
    # what decoding without special tokens made of the first: the reasoning glued to the answer
    assert gemma.decode(gemma(texts[0])["input_ids"], skip_special_tokens=True).startswith("thought\nWe need")


def test_other_tokenizers_decode_as_before():
    chatml = byte_level_tokenizer(["<|im_start|>", "<|im_end|>"], eos="<|im_end|>", pad="<|im_end|>")
    assert not uses_channels(chatml)
    # Qwen's template marks its reasoning with <think>, which is text: answer_text removes it where answers are read
    assert reasoning_template(chatml, "qwen2") is None
    assert answers(chatml, ["<think>x</think>Heat [SEP] Ronin<|im_end|><|im_start|>"], model_type="qwen2") == [
        "<think>x</think>Heat [SEP] Ronin"]  # fmt: skip
