import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELEASE = ROOT / "tests" / "fixtures" / "recbench"

os.environ.setdefault("WANDB_MODE", "offline")
# Under pytest-xdist (make test) each worker, and each script it starts, takes its share of the cores: torch's
# OpenMP threads in two workers on 2 cores spun against each other: the learn check took 1,118 s beside the
# other worker, 480 s with one thread each, about 300 s alone.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // WORKERS)))

# Fixtures that start scripts or build models: a test using one is an integration test.
INTEGRATION_FIXTURES = {
    "tiny_model", "train_data", "movie_data", "perrec_data", "prepared", "adapters", "tiny_adapter", "single",
}  # fmt: skip
STARTS_PROCESSES = ("run_script(", "subprocess.", "launch(")


# tier -> tests collected, when this session collected the whole suite (before -m or -k deselect any)
TIER_COUNTS: dict[str, int] = {}


def pytest_collection_modifyitems(config, items):
    """Tiers: ``slow`` (marked: the embedded model), ``integration`` (subprocesses or the tiny model),
    ``unit`` (everything else: pure Python, the whole tier in seconds). Runs before pytest's own
    ``-m``/``-k`` deselection (a conftest's hooks come first), so it sees every test collected."""

    for item in items:
        if item.get_closest_marker("slow") or item.get_closest_marker("integration"):
            continue
        uses = set(getattr(item, "fixturenames", ()))
        heavy = uses & INTEGRATION_FIXTURES or (hasattr(item, "function") and starts_processes(item.function))
        item.add_marker(pytest.mark.integration if heavy else pytest.mark.unit)
    # the heaviest files first (the embedded model's, then those starting scripts, most such tests first), so
    # that the workers of make test (--dist loadfile --no-loadscope-reorder) start the minutes-long files at
    # once and the unit files fill the end: in collection order the training files came last, and one worker
    # finished minutes after the other (docs/measured-figures.md); a stable sort keeps each file's own order
    file_tier: dict[Path, int] = {}
    heavy_tests: dict[Path, int] = {}
    for item in items:
        level = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("integration") else 2
        file_tier[item.path] = min(file_tier.get(item.path, 2), level)
        heavy_tests[item.path] = heavy_tests.get(item.path, 0) + (level < 2)
    items.sort(key=lambda item: (file_tier[item.path], -heavy_tests[item.path]))
    whole = {Path(config.rootpath, arg).resolve() for arg in config.args} <= {ROOT, ROOT / "tests"}
    if whole:
        for tier in ("unit", "integration", "slow"):
            TIER_COUNTS[tier] = sum(1 for item in items if item.get_closest_marker(tier))


def starts_processes(function, seen: frozenset = frozenset()) -> bool:
    """Whether ``function`` starts a process, itself or through a test helper it calls (``evaluate(...)``
    running a script), followed through the helpers of any test module."""
    import inspect

    source = inspect.getsource(function)
    if any(call in source for call in STARTS_PROCESSES):
        return True
    for name, value in vars(inspect.getmodule(function)).items():
        if (
            inspect.isfunction(value)
            and name not in seen
            and f"{name}(" in source
            and str(ROOT / "tests") in (inspect.getsourcefile(value) or "")
            and starts_processes(value, seen | {name})
        ):
            return True
    return False


def read_view(path) -> list[dict]:
    """A training file as training reads it: the file itself, or the view derived from the folder's rows."""
    from rectune.training.views import view_examples

    return read_jsonl(path) if Path(path).is_file() else view_examples(Path(path))


def read_jsonl(path) -> list[dict]:
    """Every JSON object of a JSONL file (the files under test)."""
    from rectune.core.io import numbered_jsonl

    return [row for _, row in numbered_jsonl(path)]


def wandb_run(run_file) -> dict:
    """What an offline W&B run file recorded, read back record by record with wandb's own protobufs.

    Returns ``{"name": ..., "group": ..., "tags": [...], "history": [row, ...], "summary": {...}, "config": {...},
    "artifacts": {name: {path: local file}}}`` with JSON-decoded values and nested keys joined by "/". The file is
    a LevelDB-style log (7-byte header ``:W&B``, 32 KiB blocks, records split into FULL/FIRST/MIDDLE/LAST chunks);
    wandb 0.31 ships no reader for it.
    """
    import struct

    from wandb.proto import wandb_internal_pb2

    data = Path(run_file).read_bytes()
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    pos, pending, chunks = 7, b"", []
    while pos + 7 <= len(data):
        space = 32768 - pos % 32768
        if space < 7:  # a block's tail too short for a record header is padding
            pos += space
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
    run: dict = {"name": None, "history": [], "summary": {}, "config": {}, "artifacts": {}}

    def items(entries) -> dict:
        return {entry.key or "/".join(entry.nested_key): json.loads(entry.value_json) for entry in entries}

    for chunk in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            run["history"].append(items(record.history.item))
        elif kind == "summary":
            run["summary"].update(items(record.summary.update))
        elif kind == "config":
            run["config"].update(items(record.config.update))
        elif kind == "artifact":  # name -> {file in the artifact: where its bytes wait for `wandb sync`}
            files = {entry.path: entry.local_path for entry in record.artifact.manifest.contents}
            run["artifacts"][record.artifact.name] = files
        elif kind == "run":
            run["name"], run["group"], run["tags"] = (
                record.run.display_name,
                record.run.run_group,
                list(record.run.tags),
            )
            run["config"].update(items(record.run.config.update))
    return run


def run_script(
    script: str, *args: str, check: bool = True, fault: str | None = None, cwd: Path = ROOT,
    timeout: float | None = None, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:  # fmt: skip
    """Run one of the project's entry scripts the way a user would; ``fault`` names a point where it
    kills itself (``RECTUNE_FAULT``, see rectune.core.io.fault_point); ``timeout`` fails a run that hangs;
    ``env`` adds to the environment."""
    env = {**os.environ, **(env or {}), **({"RECTUNE_FAULT": fault} if fault else {})}
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env,
        timeout=timeout,
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"{script} failed:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def movie_data(tmp_path_factory) -> Path:
    """The movie fixture release converted with every query in the test split."""
    out = tmp_path_factory.mktemp("movie")
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "1.0")
    return out


CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# google/gemma-2-2b-it's chat template as published: it raises on a system message
GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def model_with_template(folder: Path, model: Path, template: str | None) -> Path:
    """A copy of ``model`` whose tokenizer carries ``template`` (None: no chat template, as a base model's)."""
    from transformers import AutoTokenizer

    shutil.copytree(model, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = template
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, movie_data) -> Path:
    """A randomly initialised 2-layer Llama with a byte-level BPE tokenizer trained on the fixture texts."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = [
        json_text for row in read_jsonl(movie_data / "test.jsonl") for json_text in (row["query"], *row["ground_truth"])
    ]
    texts += [item["title"] for item in read_jsonl(movie_data / "catalog.jsonl")]
    texts += ["You are a movie recommender system. You are given a query from the user."] * 5
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=512,
            special_tokens=["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>"
    )
    tokenizer.chat_template = CHATML
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        initializer_range=0.3,  # a frozen lm_head at the default 0.02 keeps logits near uniform: LoRA could not learn
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny_model")
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def gpt2_model(folder: Path, tiny_model: Path, positions: int) -> Path:
    """A 2-layer GPT-2 with the fixture's tokenizer and a learned table of ``positions`` absolute positions."""
    from transformers import GPT2Config, GPT2LMHeadModel

    ids = json.loads((tiny_model / "config.json").read_text())
    config = GPT2Config(
        vocab_size=ids["vocab_size"], n_positions=positions, n_embd=32, n_layer=2, n_head=2,
        eos_token_id=ids["eos_token_id"], bos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"],
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model / name, folder / name)
    return folder


def model_asking_for(folder: Path, model: Path, **settings) -> Path:
    """A copy of ``model`` whose generation_config.json adds ``settings``, as a stranger's checkpoint may."""
    shutil.copytree(model, folder)
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**(json.loads(path.read_text()) if path.is_file() else {}), **settings}))
    return folder


@pytest.fixture(scope="session")
def adapters(tmp_path_factory, tiny_model):
    """Three rank-4 adapters with random (non-zero) A and B, as three trained formats would be."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("adapters")
    paths = []
    for i in range(3):
        torch.manual_seed(100 + i)
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        peft_model = get_peft_model(model, config)
        peft_model.save_pretrained(folder / f"format{i}")
        paths.append(folder / f"format{i}")
    return paths


@pytest.fixture(scope="session")
def train_data(tmp_path_factory) -> Path:
    """The movie fixture with every query in the training files (and an empty test split)."""
    out = tmp_path_factory.mktemp("train_data")
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "0.0")
    return out


@pytest.fixture(scope="session")
def grounded_data(tmp_path_factory) -> Path:
    """The movie fixture as grounded prompts (10 retrieved candidates, K 5), every query in training."""
    out = tmp_path_factory.mktemp("grounded")
    run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "0.0",
        "--candidates", "10", "--candidate-order", "retriever", "--k", "5",
    )  # fmt: skip
    return out


def can_mount_tmpfs() -> bool:
    """Whether a test may make a small tmpfs (a real full disk) in a mount namespace of its own."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


def write_recipe(path: Path, **values) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(values))
    return path


def one_step_grpo_recipe(path: Path, model: Path, data_file: Path, out: Path, **extra) -> Path:
    """A one-step GRPO recipe on the tiny model (``extra`` adds or overrides keys)."""
    values = {
        "model_name_or_path": str(model),
        "use_peft": True,
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_target_modules": ["q_proj", "v_proj"],
        "datasets": [{"path": "json", "data_files": str(data_file)}],
        "output_dir": str(out),
        "max_steps": 1,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 8,
        "logging_steps": 1,
        "report_to": ["none"],
    }
    return write_recipe(path, **{**values, **extra})
