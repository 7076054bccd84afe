"""Malformed reports, weights and server JSON of any size are one line, never a traceback."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, run_script, write_recipe
from test_hostile import ask, one_line, raw, send  # noqa: F401 (raw: the fixture of hostile servers)

from rectune.core.cli import run
from rectune.core.io import RecTuneError

SUMMARY = {"n": 1, "precision": 0.5, "recall": 0.5}
MALFORMED_REPORTS = {
    "overall not an object": {"overall": [1], "by_task": {}},
    "a task summary not an object": {"overall": SUMMARY, "by_task": {"explicit": "0.5"}},
    "a value not a number": {"overall": {**SUMMARY, "recall": "high"}, "by_task": {}},
    "per_query not records": {"overall": SUMMARY, "by_task": {}, "per_query": [["a", 1]]},
    "config not an object": {"overall": SUMMARY, "by_task": {}, "config": "x"},
    "metrics not names": {"overall": SUMMARY, "by_task": {}, "metrics": [1, 2]},
    "a summary without its count": {"overall": {"recall": 0.5}, "by_task": {}},
    "a per-query score not a number": {
        "overall": SUMMARY,
        "by_task": {},
        "per_query": [{"id": "q", "task": "explicit", "recall": "x"}],
    },  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(MALFORMED_REPORTS))
def test_compare_on_a_malformed_report_is_one_line(tmp_path, case):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder, report in ((good, {"overall": SUMMARY, "by_task": {}}), (bad, MALFORMED_REPORTS[case])):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(report))
    result = run_script("evaluate/compare.py", good, bad, "--out", tmp_path / "comparison", check=False)
    one_line(result, "bad/report.json: not a RecTune report")


HUGE_NUMBER = b'{"choices": [{"message": {"content": "Heat"}}], "usage": {"prompt_tokens": ' + b"9" * 5000 + b"}}"


def test_a_5000_digit_number_in_a_servers_answer_is_an_unusable_answer(raw):  # noqa: F811
    endpoint = raw(lambda handler, n: send(handler, HUGE_NUMBER))
    with pytest.raises(RecTuneError, match="not JSON .* after 2 tries"):
        ask(endpoint.url, retries=1)


def test_a_5000_digit_number_in_a_refusal_is_one_line(raw, tmp_path, movie_data):  # noqa: F811
    endpoint = raw(lambda handler, n: send(handler, b'{"error": {"code": ' + b"9" * 5000 + b"}}", status=404))
    with pytest.raises(RecTuneError, match="404") as caught:
        ask(endpoint.url, retries=0)
    assert "\n" not in str(caught.value)


def test_merging_a_cut_adapter_is_one_line(tmp_path, adapters):
    cut = tmp_path / "cut"
    shutil.copytree(adapters[1], cut)
    weights = cut / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    result = run_script("train/merge.py", "--adapters", adapters[0], cut, "--out", tmp_path / "merged", check=False)
    one_line(result, "cut: adapter_model.safetensors is cut short")
    assert not (tmp_path / "merged").exists()


def test_a_movielens_folder_given_as_a_recbench_release_names_the_route(tmp_path):
    release = tmp_path / "ml-1m"
    release.mkdir()
    for name in ("ratings.dat", "movies.dat"):
        shutil.copy(ROOT / "tests" / "fixtures" / "ratings" / name, release / name)
    result = run_script("data_prep/recbench.py", "--src", release, "--domain", "movies", "--out", tmp_path / "out",
                        check=False)  # fmt: skip
    one_line(result, "is a MovieLens release, not a RecBench+ one", f"build_benchmark.py --movielens {release}")


def test_a_missing_model_under_accelerate_launch_q_is_one_line(tmp_path, train_data):
    """The README's `accelerate launch -q`: RecTune's line ends the output, with no launcher traceback after it."""
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path=str(tmp_path / "no-such-model"),
                          datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
                          output_dir=str(tmp_path / "sft"), report_to=["none"])  # fmt: skip
    launch = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--num_processes", "1", "--cpu"]
    result = subprocess.run([*launch, str(ROOT / "train" / "sft.py"), str(recipe)], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.splitlines()[-1]
    assert last == f"error: {tmp_path / 'no-such-model'}: not a model folder here, nor a Hugging Face model id"


def test_a_rust_librarys_panic_is_one_line(capsys):
    """tokenizers panics where Oniguruma gives up on a pattern: pyo3's PanicException, which no ``except
    Exception`` catches."""
    from tokenizers import Regex, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Split

    tokenizer = Tokenizer(WordLevel({"a": 0}, unk_token="a"))
    tokenizer.pre_tokenizer = Split(Regex("(a|aa)+$"), "isolated")
    with pytest.raises(SystemExit) as ended:
        run(lambda: tokenizer.encode("a" * 200 + "b"))
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: the model's tokenizer gave up on a text (Onig: Regex search error: retry-limit-in-match over): a "
        "Split or Replace pattern in its tokenizer.json that backtracks without end? Use the tokenizer of the "
        "model it was trained from"
    )
    with pytest.raises(ZeroDivisionError):  # anything else is a bug: its traceback
        run(lambda: 1 / 0)


def test_running_out_of_memory_is_one_line_naming_the_settings(capsys):
    """A batch too large for the device: torch's OutOfMemoryError (a GPU's), the CPU allocator's refusal and
    NumPy's MemoryError were tracebacks (through TRL and transformers) that named no setting."""
    import numpy as np
    import torch

    advice = (
        "; smaller batches, sequences or samples need less (training: per_device_train_batch_size with more "
        "gradient_accumulation_steps, max_length or max_completion_length, num_generations, gradient_checkpointing; "
        "evaluation: --batch-size; compare.py: --bootstrap-samples)"
    )
    with pytest.raises(SystemExit) as ended:
        run(lambda: torch.empty(2**50, dtype=torch.uint8))  # a pebibyte: refused by any machine's allocator
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: out of memory: the CPU could not allocate 1,048,576.0 GiB more{advice}"
    )
    cuda = (  # torch's words on a GPU, as it prints them
        "CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB of which 12.73 GiB "
        "is free. Including non-PyTorch memory, this process has 18.73 GiB memory in use. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )

    def step() -> None:
        raise torch.OutOfMemoryError(cuda)

    with pytest.raises(SystemExit):
        run(step)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: out of memory: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of "
        f"31.47 GiB of which 12.73 GiB is free.{advice}"
    )
    # NumPy's, as compare.py's bootstrap gave it for --bootstrap-samples 99999999999; past any machine's address
    # space, so that no allocator can grant it
    with pytest.raises(SystemExit):
        run(lambda: np.random.default_rng(0).integers(0, 30, size=(99999999999, 3000)))
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: out of memory: Unable to allocate 2.13 PiB for an array with shape (99999999999, 3000) and data type "
        f"int64{advice}"
    )
    with pytest.raises(RuntimeError, match="another runtime error"):  # any other is a bug: its traceback
        run(lambda: (_ for _ in ()).throw(RuntimeError("another runtime error")))


def test_running_out_of_memory_while_an_adapter_loads_is_not_blamed_on_the_adapter():
    """PEFT's RuntimeErrors as it loads an adapter are read as tensors shaped for another model; an allocation
    that fails there is the device's limit, and goes on to the entry script's out-of-memory line."""
    import torch

    from rectune.models.checkpoints import peft_loading

    with pytest.raises(torch.OutOfMemoryError), peft_loading("adapter", "base"):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
    with pytest.raises(RecTuneError, match="does not fit base"), peft_loading("adapter", "base"):
        raise RuntimeError("size mismatch for lora_A")
