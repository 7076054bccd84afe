"""The README's demo table names the demo inputs it was measured on; they must be this checkout's."""

import importlib.util
import re

from conftest import ROOT


def provenance():
    spec = importlib.util.spec_from_file_location("provenance", ROOT / "demo" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_demo_table_was_measured_on_these_inputs():
    recorded = re.findall(r"demo measured at commit ([0-9a-f]{7,40}), demo inputs ([0-9a-f]{12})", (
        ROOT / "README.md").read_text())  # fmt: skip
    assert len(recorded) == 1, "the README's demo table names the commit and demo inputs it was measured on"
    assert recorded[0][1] == provenance().inputs_hash(), (
        "the demo's inputs changed since the README's table was measured: run `make demo` and update the table"
    )


def test_the_hash_follows_the_inputs(tmp_path, monkeypatch):
    module = provenance()
    before = module.inputs_hash()
    copy = tmp_path / "root"
    for name in (*module.FILES, "Makefile"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((ROOT / name).read_bytes())
    monkeypatch.setattr(module, "ROOT", copy)
    assert module.inputs_hash() == before
    makefile = (copy / "Makefile").read_text()
    (copy / "Makefile").write_text(makefile.replace("test-fast: install", "test-fast:  install"))
    assert module.inputs_hash() == before  # a target the demo does not use
    (copy / "Makefile").write_text(makefile.replace("DEMO_BASELINES := bm25", "DEMO_BASELINES := bm25 als"))
    assert module.inputs_hash() != before
    (copy / "Makefile").write_text(makefile)
    recipe = copy / "recipes/smollm2_movie_cpu_grpo.yaml"
    recipe.write_text(recipe.read_text().replace("max_steps: 16", "max_steps: 17"))
    assert module.inputs_hash() != before


def test_the_line_names_a_dirty_tree_as_run_configs_do(monkeypatch):
    module = provenance()
    monkeypatch.setattr(module, "git_commit", lambda: "abc1234-dirty")
    assert module.line() == f"demo measured at commit abc1234-dirty, demo inputs {module.inputs_hash()}"
