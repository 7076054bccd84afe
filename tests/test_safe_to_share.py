"""Recipes are data, and what RecTune writes for others is escaped (part of issue 23)."""

import csv
import json
import os
import shutil

import pytest
from conftest import ROOT, run_script
from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

from rectune import provenance
from rectune.escaping import csv_cell, markdown_cell, markdown_text, shell_word
from rectune.io import DataError
from rectune.recipes import RunArguments, parse_recipe
from rectune.sharing import model_card


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


def test_model_card_fields_cannot_inject():
    name = "evil\n# Injected heading\n<script>alert(1)</script>\n```\nrm -rf ~"
    card = model_card({"recipe": name, "stage": "sft", "data": []}, "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert "\n# Injected" not in card and "<script>" not in card
    command = next(line for line in card.splitlines() if line.startswith("python evaluate/run.py"))
    assert command.endswith("--out reports/evil_Injected_heading_script_alert_1_script_rm_-rf_-sft")
    assert card.count("```") == 2  # the one code block the card writes, opened and closed
