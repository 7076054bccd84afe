"""Recipes are data, and what RecTune writes for others is escaped (part of issue 23)."""

import csv
import json
import os
import shutil
import sys

import pytest
import yaml
from conftest import ROOT, run_script, write_recipe
from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

from rectune.core import provenance
from rectune.core.escaping import csv_cell, markdown_cell, markdown_text, shell_word
from rectune.core.io import DataError
from rectune.models.sharing import model_card
from rectune.training.arguments import RunArguments
from rectune.training.recipes import parse_recipe


def test_a_recipe_cannot_set_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    recipe = tmp_path / "shared.yaml"
    shutil.copy(ROOT / "recipes" / "smollm2_movie_cpu.yaml", recipe)
    with recipe.open("a") as handle:
        handle.write("env:\n  WANDB_MODE: online\n  WANDB_BASE_URL: http://127.0.0.1:8765\n")
    with pytest.raises(DataError, match="shared.yaml: key 'env': a recipe cannot set environment variables"):
        parse_recipe((SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe)])
    assert os.environ["WANDB_MODE"] == "offline" and "WANDB_BASE_URL" not in os.environ


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_recording_the_commit_runs_no_command(tmp_path, monkeypatch):
    planted = tmp_path / "ran"
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"id > {planted}; echo")
    commit = provenance.git_commit()
    assert not planted.exists()
    assert commit != "unknown" and len(commit.removesuffix("-dirty")) >= 7


def test_escaping_rules():
    assert [csv_cell(v) for v in ("=cmd|' -C calc'!A0", "@SUM(1+1)", "+1", "-2", "\tx", "sft", 0.5)] == [
        "'=cmd|' -C calc'!A0", "'@SUM(1+1)", "'+1", "'-2", "'\tx", "sft", 0.5,
    ]  # fmt: skip
    assert markdown_cell("a|b <img src=x onerror=alert(1)>") == "a\\|b &lt;img src=x onerror=alert(1)&gt;"
    assert markdown_text("run\n# Owned\n```") == "run # Owned \\`\\`\\`"
    assert markdown_text("a\x9b2J\x85b") == "a 2J b"  # C1 controls: a one-byte CSI, a next line
    assert shell_word("x; rm -rf ~") == "'x; rm -rf ~'"


def test_compare_escapes_names(tmp_path):
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    names = ["=cmd|' -C calc'!A0", "@SUM(1+1)", "<img src=x onerror=alert(1)>"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"overall": summary, "by_task": {}}))
    prefix = tmp_path / "comparison"
    run_script("evaluate/compare.py", *(tmp_path / n for n in names), "--out", prefix)
    cells = [row["checkpoint"] for row in csv.DictReader(prefix.with_suffix(".csv").open())]
    assert sorted(cells) == sorted(["'=cmd|' -C calc'!A0", "'@SUM(1+1)", "<img src=x onerror=alert(1)>"])
    table = prefix.with_suffix(".md").read_text()
    assert "<img" not in table and "&lt;img src=x onerror=alert(1)&gt;" in table
    assert "=cmd\\|' -C calc'!A0" in table
    assert all(line.count("|") - line.count("\\|") == 8 for line in table.splitlines() if line.startswith("| "))


def test_compare_charts_names_that_read_as_tex_as_they_are(tmp_path):
    """matplotlib reads `$...$` in a label as TeX: a folder `a$\\frac{1$` or a colleague's task `$^{$` was its
    ParseSyntaxException, a traceback once the table and CSV were written."""
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    names = ["a$\\frac{1$", "b$^{$"]
    for name in names:
        (tmp_path / name).mkdir()
        report = {"overall": summary, "by_task": {"$\\sqrt{$": summary}}
        (tmp_path / name / "report.json").write_text(json.dumps(report))
    prefix = tmp_path / "comparison"
    run_script("evaluate/compare.py", *(tmp_path / n for n in names), "--out", prefix)
    assert prefix.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(prefix.with_suffix(".csv").open()))
    assert {(row["task"], row["checkpoint"]) for row in rows} == {
        (task, name) for task in ("$\\sqrt{$", "overall") for name in names
    }


def test_compare_prints_a_colleagues_names_escaped(tmp_path):
    """A report's checkpoint is named by whoever wrote it: a bidirectional override or a one-byte CSI (C1) in it
    reached the terminal, which Markdown's escaping (C0 controls become spaces) let through."""
    summary = {"n": 1, "precision": 0.5, "recall": 0.5, "cmr": None, "ftr": 0.0}
    for name, checkpoint in (("a", "mine"), ("b", "evil\u202eabc\x9b2J\x1b]52;c;aGk=\x07")):
        (tmp_path / name).mkdir()
        report = {"overall": summary, "by_task": {}, "config": {"kind": "baseline", "checkpoint": checkpoint}}
        (tmp_path / name / "report.json").write_text(json.dumps(report))
    prefix = tmp_path / "comparison"
    result = run_script("evaluate/compare.py", tmp_path / "a", tmp_path / "b", "--out", prefix)
    assert "| evil\\u202eabc 2J ]52;c;aGk=  |" in result.stdout and result.stdout.isascii()
    # matplotlib's warnings name the glyphs the chart's labels lack: the escape character among them
    assert "UserWarning: Glyph 27 (\\x1b) missing" in result.stderr and "\x1b" not in result.stderr
    table = prefix.with_suffix(".md").read_text()
    assert "| evil\u202eabc 2J ]52;c;aGk=  |" in table  # the file keeps the name, less its controls


def test_model_card_fields_cannot_inject():
    name = "evil\n# Injected heading\n<script>alert(1)</script>\n```\nrm -rf ~"
    card = model_card({"recipe": name, "stage": "sft", "data": []}, "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert "\n# Injected" not in card and "<script>" not in card
    command = next(line for line in card.splitlines() if line.startswith("python evaluate/run.py"))
    assert command.endswith("--out reports/evil_Injected_heading_script_alert_1_script_rm_-rf_-sft")
    assert card.count("```") == 2  # the one code block the card writes, opened and closed


PLANTED_CLI = "hf_plantedOnTheCommandLine0123456789"
PLANTED_ENV = "plantedInTheEnvironment0123456789abcdefgh"  # 40 characters, the shape of a W&B key


def test_no_secret_reaches_any_output_file(tmp_path, tiny_model, train_data, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", PLANTED_ENV)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    run = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "sft.yaml", model_name_or_path=str(tiny_model), output_dir=str(run / "sft"), max_steps=2,
        save_steps=1, per_device_train_batch_size=2, max_length=256, report_to=["wandb"], use_peft=True, lora_r=2,
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    run_script("train/sft.py", recipe, "--hub-token", PLANTED_CLI)  # the dash spelling HfArgumentParser takes too
    files = [path for path in run.rglob("*") if path.is_file()]
    assert any(path.name == "training_args.bin" for path in files) and any("wandb" in str(p) for p in files)
    for path in files:
        data = path.read_bytes()
        assert PLANTED_CLI.encode() not in data and PLANTED_ENV.encode() not in data, path
    saved = yaml.safe_load((run / "sft" / "recipe.yaml").read_text())
    assert "hub_token" not in saved and saved["max_steps"] == 2


def test_a_recipe_cannot_hold_a_secret(tmp_path):
    for key, value in [("hub_token", PLANTED_CLI), ("model_init_kwargs", {"token": PLANTED_CLI})]:
        recipe = write_recipe(tmp_path / "shared.yaml", output_dir=str(tmp_path / "out"), **{key: value})
        with pytest.raises(DataError, match=f"key '{key}': a recipe cannot hold a secret") as caught:
            parse_recipe((SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe)])
        assert PLANTED_CLI not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value", "found"),
    [("output_dir", "out\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b"),  # OSC 52: writes the clipboard as it is printed
     ("run_name", "run\u202egpj.exe", "\u202e"),  # a bidirectional override
     ("datasets", [{"path": "json", "data_files": {"train": "a\x9b2Jb"}}], "\x9b"),  # C1's one-byte CSI, nested
     ("model_init_kwargs", {"\x1b[2J": 1}, "\x1b")],  # a mapping's key
)  # fmt: skip
def test_a_recipe_holds_no_text_a_terminal_acts_on(tmp_path, key, value, found):
    sft = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
    recipe = write_recipe(
        tmp_path / "r.yaml", model_name_or_path="m", **{"output_dir": str(tmp_path / "o"), key: value}
    )
    with pytest.raises(DataError) as caught:
        parse_recipe(sft, [str(recipe)])
    assert str(caught.value) == (
        f"{recipe}: key {key!r}: holds {found!r}, a character a terminal acts on rather than shows (a recipe's paths "
        "and names are printed); a recipe's text holds none"
    )
    # tabs and line breaks are text; typed on the command line, a name is the user's own
    kept = write_recipe(tmp_path / "k.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"), run_name="a\tb\nc")
    assert parse_recipe(sft, [str(kept)])[0].run_name == "a\tb\nc"
    assert parse_recipe(sft, [str(kept), "--run_name", "r\u202e"])[0].run_name == "r\u202e"


def test_the_hub_token_moves_out_of_the_arguments(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    model = ["--model_name_or_path", "m"]
    argv = ["sft.py", *model, "--output_dir", "out", f"--hub_token={PLANTED_CLI}", "--report_to", "none"]
    monkeypatch.setattr(sys, "argv", argv)
    training_args, *_ = parse_recipe((SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments))
    assert training_args.hub_token is None and os.environ["HF_TOKEN"] == PLANTED_CLI
    assert sys.argv == ["sft.py", *model, "--output_dir", "out", "--report_to", "none"]  # what W&B records
