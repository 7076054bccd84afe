"""An output is never one of the inputs its run reads, nor a folder holding one, --overwrite or not: data_prep's
--out holding --src deleted the release it had just read, evaluation's --out naming the model's folder replaced
its config.json with the report's, a merge's --out holding an adapter removed it."""

import json
import shutil

import pytest
from conftest import RELEASE, run_script, write_recipe
from test_hostile import one_line, snapshot

from rectune.core.io import RecTuneError
from rectune.core.kept_inputs import refuse_outputs_over_inputs


def test_an_output_that_is_holds_or_lies_in_an_input_is_one_line(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data/rows.jsonl").write_text("{}\n")
    inputs = [("--model", "org/hub-id"), ("--kg", None), ("--data", tmp_path / "data/rows.jsonl"),
              ("--src", tmp_path / "data")]  # fmt: skip
    for out, what in (
        (tmp_path / "data/rows.jsonl", "is --data"), (tmp_path / "data", "holds --data"), (tmp_path, "holds --data"),
        (tmp_path / "data/report", "lies in --src"),
    ):  # fmt: skip
        with pytest.raises(RecTuneError) as caught:
            refuse_outputs_over_inputs([("--out", out)], inputs)
        assert str(caught.value) == (
            f"--out {out}: {what} {inputs[2 if 'data' in what else 3][1]}, which this run reads; give an output "
            "apart from the inputs (--overwrite replaces an earlier output, never an input)"
        )
    # beside an input, or where an input is no path here (a Hub id, a flag not given): nothing of it goes
    for out in (tmp_path / "report", tmp_path / "org/hub-id", tmp_path / "dat"):
        refuse_outputs_over_inputs([("--out", out)], inputs)
    refuse_outputs_over_inputs([("--out", None)], inputs)
    (tmp_path / "loop").symlink_to("loop")  # a link to itself: left to the output checks that name links
    refuse_outputs_over_inputs([("--out", tmp_path / "loop"), ("--out", tmp_path / "loop/x")], inputs)
    refuse_outputs_over_inputs([("--out", tmp_path / "report")], [("--kg", tmp_path / "loop")])


def test_data_prep_keeps_the_release_it_reads(tmp_path):
    release = tmp_path / "recbench"
    shutil.copytree(RELEASE, release)
    before = snapshot(release)
    for out, what in ((release, "is"), (tmp_path, "holds"), (release / "data", "lies in")):
        result = run_script("data_prep/recbench.py", "--src", release, "--domain", "movie", "--out", out,
                            "--overwrite", check=False)  # fmt: skip
        one_line(result, f"--out {out}: {what} --src {release}, which this run reads")
        assert snapshot(release) == before and sorted(p.name for p in release.iterdir()) == ["data"]
    # the same for each data_prep script and every path it is given: the ratings another one reads
    ratings = release / "data/movie/ratings.dat"
    result = run_script("data_prep/perrecbench.py", "--reviews", ratings, "--domain", "movies", "--out",
                        release / "data/movie", "--overwrite", check=False)  # fmt: skip
    one_line(result, f"--out {release / 'data/movie'}: holds --reviews {ratings}")
    assert snapshot(release) == before
    run_script("data_prep/recbench.py", "--src", release, "--domain", "movie", "--out", tmp_path / "prepared")


def test_evaluation_and_scoring_keep_the_model_and_answers_they_read(tmp_path, tiny_model, movie_data):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    before = snapshot(model)
    data = movie_data / "test.jsonl"
    result = run_script("evaluate/run.py", "--model", model, "--data", data, "--out", model, "--overwrite",
                        "--no-wandb", check=False)  # fmt: skip
    one_line(result, f"--out {model}: is --model {model}")
    # an adapter over it: its base model is read as well, found as the checkpoint resolves
    adapter = tmp_path / "runs/sft"
    adapter.mkdir(parents=True)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(model), "r": 4,
              "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}  # fmt: skip
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    result = run_script("evaluate/run.py", "--model", adapter, "--data", data, "--out", model, "--overwrite",
                        "--no-wandb", check=False)  # fmt: skip
    one_line(result, f"--out {model}: is the base model {model}")
    assert snapshot(model) == before and not (model / ".rectune.json").exists()

    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"id": "movie/explicit/0", "completion": "1. Heat"}\n')
    result = run_script("evaluate/score.py", "--data", data, "--predictions", answers, "--out", answers,
                        "--overwrite", check=False)  # fmt: skip
    one_line(result, f"--out {answers}: is --predictions {answers}")
    assert answers.read_text() == '{"id": "movie/explicit/0", "completion": "1. Heat"}\n'


def test_a_merge_keeps_the_adapters_and_training_its_data(tmp_path, tiny_model, adapters, train_data):
    runs = tmp_path / "runs"
    for adapter in adapters[:2]:
        shutil.copytree(adapter, runs / adapter.name)
    before = snapshot(runs)
    result = run_script("train/merge.py", "--adapters", runs / adapters[0].name, runs / adapters[1].name,
                        "--out", runs, "--overwrite", check=False)  # fmt: skip
    one_line(result, f"--out {runs}: holds --adapters {runs / adapters[0].name}")
    full = runs / adapters[0].name / "full"
    result = run_script("train/merge.py", "--adapters", runs / adapters[0].name, runs / adapters[1].name, "--out",
                        tmp_path / "m", "--full-model", full, "--overwrite", check=False)  # fmt: skip
    one_line(result, f"--full-model {full}: lies in --adapters {runs / adapters[0].name}")
    assert snapshot(runs) == before

    data = tmp_path / "data"
    shutil.copytree(train_data, data)
    before = snapshot(data)
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(data), max_steps=1, use_peft=True,
        report_to=["none"], datasets=[{"path": "json", "data_files": str(data / "train_sft.jsonl")}],
    )  # fmt: skip
    result = run_script("train/sft.py", recipe, "--overwrite", check=False)
    one_line(result, f"output_dir {data}: holds training data {data / 'train.jsonl'}, which this run reads")
    assert snapshot(data) == before
    # a run folder inside the data's folder replaces nothing the run reads (a data file in the current folder)
    run_script("train/sft.py", recipe, "--output_dir", data / "run")
    assert (data / "run/finished.json").is_file()


def test_the_command_line_check_names_positional_inputs_too(tmp_path):
    """A script with a positional path and add_output_arguments: its name was an IndexError in the check."""
    from rectune.core.cli import ArgumentParser, add_output_arguments

    parser = ArgumentParser()
    parser.add_argument("src")
    add_output_arguments(parser)
    with pytest.raises(RecTuneError, match=rf"^--out {tmp_path / 'x'}: lies in src {tmp_path}, which this run reads"):
        parser.parse_args([str(tmp_path), "--out", str(tmp_path / "x")])
    assert parser.parse_args([str(tmp_path / "x"), "--out", str(tmp_path / "y")]).out == str(tmp_path / "y")
