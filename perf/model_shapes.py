"""The paper models' architectures, written here, built with random weights: their speed without the download.

A throughput or memory figure depends on the architecture (widths, layers, heads, vocabulary), not on
the weights, so ``make gpu-check MODEL_SHAPE=qwen2.5-3b`` trains and generates with a model of
Qwen2.5-3B-Instruct's exact shape, random bf16 weights and a byte-level tokenizer of its vocabulary
size (every byte a token, the rest of the vocabulary never produced: text takes more tokens than with
the real tokenizer, which changes nothing per token). The configurations follow the models' own
``config.json`` on the Hub.

    python -m perf.model_shapes qwen2.5-3b outputs/shapes/qwen2.5-3b
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rectune.core.io import RecTuneError
from rectune.core.outputs import check_output_folder, output_set

SHAPES: dict[str, dict] = {
    "qwen2.5-3b": {  # Qwen/Qwen2.5-3B-Instruct
        "model_type": "qwen2",
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
    },
    "llama-3.1-8b": {  # meta-llama/Llama-3.1-8B-Instruct
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
    "smollm2-135m": {  # HuggingFaceTB/SmolLM2-135M-Instruct, the embedded model's shape
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
    },
}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def shape_config(name: str, **overrides):
    """The transformers config of shape ``name`` (``overrides`` shrink it for tests: fewer layers, say)."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise SystemExit(f"unknown model shape {name!r}; choose one of {', '.join(SHAPES)}")
    values = {**SHAPES[name], **overrides}
    return AutoConfig.for_model(values.pop("model_type"), **values)


def byte_tokenizer(vocab_size: int):
    """A byte-level tokenizer with ``vocab_size`` entries: 256 bytes, the ChatML specials, unused fillers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    while len(vocab) < vocab_size:
        vocab[f"<unused_{len(vocab)}>"] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def write_shape(name: str, out: str | Path, *, dtype: str = "bfloat16", overwrite: bool = False, **overrides) -> Path:
    """A model folder of shape ``name`` with random weights (``dtype``) and a byte-level tokenizer, written whole
    or not at all. ``out`` must be new, empty or a shape written here holding nothing else (``overwrite``: any):
    a model folder of someone's own would lose its weights to random ones."""
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out)
    check_output_folder(out, "model shape", overwrite=overwrite)  # before minutes of building a 3B model
    config = shape_config(name, **overrides)
    tokenizer = byte_tokenizer(config.vocab_size)
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = None
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    # vouched for by size and time only: hashing a 3B shape's 6 GB of random weights takes a lent GPU's seconds
    with output_set(out, "model shape", overwrite=overwrite, digest=False) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        record = {"shape": name, "overrides": overrides, "random_weights": True}
        (staging / "shape.json").write_text(json.dumps(record))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT, whoever wrote it")
    args = parser.parse_args()
    try:
        print(f"wrote {write_shape(args.shape, args.out, overwrite=args.overwrite)}")
    except RecTuneError as refused:
        sys.exit(f"model-shapes: {refused}")


if __name__ == "__main__":
    main()
