"""What the GPU measurements stand on, checked on the CPU: the paper models' shapes, the honest LoRA FLOP
count (against PyTorch's own FLOP counter), and each speed setting reaching the trainer."""

import importlib.util
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, run_script, write_recipe

from perf.flops import Shape, dense_training_flops_per_token, generation_flops_per_token, lora_training_flops_per_token
from perf.memory_estimate import parameter_counts
from perf.model_shapes import SHAPES, byte_tokenizer, shape_config, write_shape
from rectune.core.io import RecTuneError

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 300}  # fmt: skip


@pytest.mark.parametrize(("shape", "published"), [("qwen2.5-3b", 3.09e9), ("llama-3.1-8b", 8.03e9)])
def test_the_shapes_have_the_published_parameter_counts(shape, published):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape_config(shape))
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - published) / published < 0.005  # the model cards' 3.09 B and 8.03 B
    values = SHAPES[shape]
    architecture = [values[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "intermediate_size", "vocab_size", "tie_word_embeddings")]  # fmt: skip
    estimated, _ = parameter_counts(*architecture)
    assert abs(estimated - count) / count < 0.001  # the memory estimate counts the same model (norms, biases aside)


def test_the_byte_tokenizer_has_the_vocabulary_size_and_round_trips():
    tokenizer = byte_tokenizer(151936)
    assert len(tokenizer) == 151936
    text = "Amélie (2001) [SEP] 千と千尋の神隠し"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text.encode("utf-8")) and tokenizer.decode(ids) == text  # one token per byte
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id == 258


def test_the_lora_flop_count_equals_pytorchs_count_of_a_real_step():
    """Hand count for the tiny shape (hidden 64, 2 layers, 4 heads, 2 KV heads, MLP 128, vocabulary 300, rank 4):
    matmul weights per layer q 4096 + k 2048 + v 2048 + o 4096 + gate 8192 + up 8192 + down 8192 = 36,864,
    x 2 layers + the head 300 x 64 = 92,928; adapters per layer r(in+out): 512 + 384 + 384 + 512 + 768 x 3 =
    4,096, x 2 = 8,192; attention 12 x 2 x 16 x 64 = 24,576. Per token 4 x 92,928 + 6 x 8,192 + 24,576 = 445,440,
    x 32 tokens = 14,254,080, which PyTorch's FLOP counter finds in one forward and backward pass."""
    import torch
    from peft import LoraConfig, get_peft_model
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    config = shape_config("qwen2.5-3b", **TINY)
    config._attn_implementation = "eager"  # its attention products are counted (the CPU SDPA kernel's are not)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))
    model.enable_input_require_grads()  # as with activation checkpointing: the first layer's input gradient too
    shape = Shape.of(model)
    assert shape == Shape(matmul_params=92_928, lora_params=8_192, layers=2, attention_width=64)
    assert lora_training_flops_per_token(shape, 16) == 445_440
    ids = torch.randint(0, 300, (2, 16))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert counter.get_total_flops() == 14_254_080 == 32 * lora_training_flops_per_token(shape, 16)
    # the usual 6N would claim 6 x 101,120 + 24,576 = 631,296 per token: 42 % more than is computed
    assert dense_training_flops_per_token(shape, 16) == 631_296
    assert generation_flops_per_token(shape, 16) == 2 * 101_120 + 4 * 2 * 16 * 64


@pytest.fixture(scope="module")
def tiny_shape(tmp_path_factory):
    return write_shape("qwen2.5-3b", tmp_path_factory.mktemp("shape") / "qwen", dtype="float32", **TINY)


def test_a_shape_is_never_written_over_a_model_folder_it_did_not_write(tmp_path):
    theirs = tmp_path / "my-model"
    theirs.mkdir()
    (theirs / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(RecTuneError, match=r"holds files RecTune did not write there \(config.json; no"):
        write_shape("qwen2.5-3b", theirs, dtype="float32", **TINY)
    assert [p.name for p in theirs.iterdir()] == ["config.json"]
    assert (theirs / "config.json").read_text() == '{"model_type": "llama"}'
    result = subprocess.run([sys.executable, "-m", "perf.model_shapes", "qwen2.5-3b", str(theirs)],
                            capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert result.returncode == 1 and result.stderr.startswith(f"model-shapes: {theirs}: holds files RecTune did not")


def test_a_shape_cut_short_leaves_no_folder_and_the_next_write_is_whole(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    def disk_gone(*args, **kwargs):
        raise OSError("disk gone")

    out = tmp_path / "qwen"
    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", disk_gone)  # after the weights were written
    with pytest.raises(OSError, match="disk gone"):
        write_shape("qwen2.5-3b", out, dtype="float32", **TINY)
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its staging copy
    monkeypatch.undo()
    write_shape("qwen2.5-3b", out, dtype="float32", **TINY)
    written = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "shape.json"} <= written
    write_shape("qwen2.5-3b", out, dtype="float32", **TINY)  # a rewrite replaces what it wrote, whole
    assert {p.name for p in out.iterdir()} == written
    (out / "notes.txt").write_text("mine")  # but not a folder holding something it did not write
    with pytest.raises(RecTuneError, match=r"holds files RecTune did not write there \(notes.txt\)"):
        write_shape("qwen2.5-3b", out, dtype="float32", **TINY)
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "model.safetensors").write_bytes(b"edited")  # nor one whose files were changed since
    with pytest.raises(RecTuneError, match="model.safetensors changed since RecTune wrote it"):
        write_shape("qwen2.5-3b", out, dtype="float32", **TINY)
    assert (out / "model.safetensors").read_bytes() == b"edited"


def setup_line(result) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in (result.stdout + result.stderr).splitlines() if "training with" in line]
    return line[line.index("training with") :]


def test_each_speed_setting_reaches_the_trainer(tmp_path, tiny_shape, train_data):
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_shape), max_steps=1, report_to=["none"], max_length=2048,
        use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    plain = run_script("train/sft.py", recipe, "--output_dir", tmp_path / "plain", check=False)
    assert setup_line(plain).startswith("training with one process, not distributed, device ")
    assert setup_line(plain).endswith(
        "attention sdpa, activation checkpointing on, Liger kernels off, torch.compile off"  # TRL's defaults
    )
    said = plain.stdout + plain.stderr
    assert "peak GPU memory" in said if torch.cuda.is_available() else "peak resident memory" in said
    tuned = run_script(
        "train/sft.py", recipe, "--output_dir", tmp_path / "tuned", "--attn_implementation", "eager",
        "--activation_checkpointing", "false", "--torch_compile", "true", check=False,
    )  # fmt: skip
    assert setup_line(tuned).endswith(
        "attention eager, activation checkpointing off, Liger kernels off, torch.compile on"
    )
    if torch.cuda.is_available():
        return  # a GPU machine: liger-kernel may be installed and flex attention trains
    flex = run_script("train/sft.py", recipe, "--output_dir", tmp_path / "flex",
                      "--attn_implementation", "flex_attention", check=False)  # fmt: skip
    assert flex.returncode == 2 and flex.stderr.splitlines()[-1] == (
        "error: attn_implementation flex_attention trains on GPUs only (PyTorch has no CPU backward for it)"
    )
    assert not (tmp_path / "flex").exists()  # refused before anything was written
    if importlib.util.find_spec("liger_kernel") is not None:
        return  # installed: nothing to refuse
    liger = run_script("train/sft.py", recipe, "--output_dir", tmp_path / "liger", "--use_liger_kernel", "true",
                       check=False)  # fmt: skip
    assert liger.returncode == 2 and liger.stderr.splitlines()[-1] == (
        "error: use_liger_kernel needs the liger-kernel package (pip install liger-kernel; CUDA GPUs only)"
    )


def test_a_packed_batch_goes_one_sequence_a_forward_without_flash_attention():
    from types import SimpleNamespace

    from rectune.training.setup import one_packed_sequence_a_forward

    def settings(batch=8, accumulation=4, packing=True, strategy="bfd"):
        return SimpleNamespace(per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
                               packing=packing, packing_strategy=strategy)  # fmt: skip

    # SDPA: 8 packed rows flattened into one would attend over 8,192 tokens; 1 a forward x 32 instead
    args = settings()
    line = one_packed_sequence_a_forward(args, SimpleNamespace(attn_implementation="sdpa"))
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 32)
    assert line.startswith("packed sequences with sdpa attention: 1 a forward, gradient_accumulation_steps 32")
    args = settings(batch=2, accumulation=1)
    one_packed_sequence_a_forward(args, SimpleNamespace(attn_implementation=None))  # transformers' default: SDPA
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 2)
    # left alone: flash and flex attention keep packed sequences apart; no packing, one row, or wrapped rows
    # (no flattening)
    for args, attention in ((settings(), "flash_attention_2"), (settings(), "flex_attention"),
                            (settings(packing=False), "sdpa"), (settings(batch=1), "eager"),
                            (settings(strategy="wrapped"), "sdpa")):  # fmt: skip
        before = vars(args).copy()
        assert one_packed_sequence_a_forward(args, SimpleNamespace(attn_implementation=attention)) is None
        assert vars(args) == before


def test_flex_attention_keeps_packed_documents_apart_as_sdpa_does(tiny_model):
    from transformers import AutoModelForCausalLM

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 500, (1, 48), generator=generator)
    positions = (torch.arange(48) % 16).unsqueeze(0)  # three packed documents of 16 tokens, as TRL packs them
    logits = {}
    with torch.no_grad():
        for attention in ("sdpa", "flex_attention"):
            model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation=attention)
            logits[attention] = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        alone = model(input_ids=ids[:, 16:32], position_ids=positions[:, 16:32], use_cache=False).logits
    assert torch.allclose(logits["flex_attention"], logits["sdpa"], atol=1e-5)
    assert torch.allclose(logits["flex_attention"][:, 16:32], alone, atol=1e-5)  # the second document sees itself only
