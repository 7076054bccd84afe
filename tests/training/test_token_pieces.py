"""Each completion token's share of its text: pieces that join into what the rewards read, by hand."""

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rectune.training.token_pieces import token_pieces


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE without merges: every UTF-8 byte a token, "千" three of them (SmolLM2 and GPT-2 split
    the characters outside their merges so)."""
    vocab = {symbol: index for index, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe)
    tokenizer.add_special_tokens({"eos_token": "<|im_end|>"})
    return tokenizer


def sentencepiece_tokenizer() -> PreTrainedTokenizerFast:
    """A SentencePiece-style unigram with byte fallback whose decoder strips the space opening a text (Llama 2's
    and Mistral's tokenizer.json)."""
    vocab = [("<unk>", 0.0), ("▁Heat", -1.0), ("▁Jaws", -1.0), ("▁[SEP]", -1.0), ("▁", -5.0)]
    unigram = Tokenizer(models.Unigram([*vocab, *((f"<0x{b:02X}>", -10.0) for b in range(256))], 0, True))
    unigram.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    unigram.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=unigram, unk_token="<unk>")


def test_a_character_written_in_several_bytes_is_the_piece_of_its_last():
    tokenizer = byte_tokenizer()
    ids = tokenizer("a千 🎬")["input_ids"]  # 1 + 3 + 1 + 4 bytes
    assert len(ids) == 9
    assert token_pieces(tokenizer, ids) == ["a", "", "", "千", " ", "", "", "", "🎬"]
    alone = "".join(tokenizer.decode([token]) for token in ids)
    assert alone == "a\ufffd\ufffd\ufffd \ufffd\ufffd\ufffd\ufffd"


def test_a_sentencepiece_tokenizers_spaces_are_kept():
    tokenizer = sentencepiece_tokenizer()
    ids = tokenizer("Heat [SEP] Jaws Ç")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["▁Heat", "▁[SEP]", "▁Jaws", "▁", "<0xC3>", "<0x87>"]
    assert token_pieces(tokenizer, ids) == ["Heat", " [SEP]", " Jaws", " ", "", "Ç"]
    assert "".join(tokenizer.decode([token]) for token in ids) == "Heat[SEP]Jaws\ufffd\ufffd"  # each token alone


@pytest.mark.parametrize("make", [byte_tokenizer, sentencepiece_tokenizer])
def test_the_pieces_join_into_the_decoded_text_cut_inside_a_character_too(make):
    tokenizer = make()
    ids = tokenizer("Heat [SEP] Jaws 千と千尋の神隠し Ç")["input_ids"]
    for end in range(len(ids) + 1):  # every cut, one inside each character of several bytes among them
        pieces = token_pieces(tokenizer, ids[:end])
        assert len(pieces) == end and "".join(pieces) == tokenizer.decode(ids[:end], skip_special_tokens=True)
    assert token_pieces(tokenizer, ids[:-1])[-1] == "\ufffd"  # as decoded: the rewards read it so


def test_a_byte_fallback_run_cut_inside_a_character_ends_as_decoded():
    tokenizer = sentencepiece_tokenizer()
    ids = tokenizer("Jaws 千と")["input_ids"][:6]  # ▁Jaws ▁ and the bytes of 千 and the first of と
    assert tokenizer.decode(ids) == "Jaws \ufffd\ufffd\ufffd\ufffd"  # one U+FFFD a byte of the run
    assert token_pieces(tokenizer, ids) == ["Jaws", " ", "", "", "", "\ufffd" * 4]


def test_a_special_token_writes_nothing():
    tokenizer = byte_tokenizer()
    ids = [*tokenizer("ab")["input_ids"], tokenizer.eos_token_id]
    assert token_pieces(tokenizer, ids) == ["a", "b", ""]
