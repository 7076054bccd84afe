"""The library's layers: ``ls rectune/`` shows the pipeline, and no module imports a layer above its own.

    core < data < benchmarks < models < training, evaluation

Every import counts, inside functions too (``from rectune import x`` as ``rectune.x``); training and
evaluation never import each other. The top level holds the layers and nothing else.
"""

import ast
import importlib
from pathlib import Path

import pytest
from conftest import ROOT

LAYERS = {"core": 0, "data": 1, "benchmarks": 2, "models": 3, "training": 4, "evaluation": 4}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "rectune" and parts[1] in LAYERS else None


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "rectune":
            found.update(f"rectune.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("rectune.")}


def test_the_top_level_shows_the_layers():
    entries = sorted(p.name for p in (ROOT / "rectune").iterdir() if p.name != "__pycache__")
    assert entries == ["__init__.py", "benchmarks", "core", "data", "evaluation", "models", "training"]


def test_no_module_imports_a_layer_above_its_own():
    checked = 0
    for path in (ROOT / "rectune").rglob("*.py"):
        parts = path.relative_to(ROOT / "rectune").parts
        if len(parts) == 1:
            continue  # rectune/__init__.py: the version and a warnings filter
        own = parts[0]
        for module in imports(path):
            other = layer_of(module)
            assert other is not None, f"{path}: {module} is in no layer"
            assert LAYERS[other] <= LAYERS[own], f"{path} ({own}) imports {module} ({other}), a layer above"
            assert {own, other} != {"training", "evaluation"}, f"{path} ({own}) imports {module} ({other})"
        checked += 1
    assert checked > 50


def test_scripts_and_tests_import_from_the_layers():
    """The entry scripts, perf scripts and tests import RecTune's modules where they live."""
    folders = ["data_prep", "train", "evaluate", "perf", "demo", "tests"]
    paths = [path for folder in folders for path in (ROOT / folder).rglob("*.py")]
    for path in paths:
        for module in imports(path):
            assert layer_of(module) is not None, f"{path}: {module} is in no layer"
    assert len(paths) > 50


def test_the_check_catches_an_upward_import(tmp_path):
    """The rule above is not vacuous: a data module importing training is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rectune.training.recipes import parse_recipe\n")
    (module,) = imports(bad)
    assert LAYERS[layer_of(module)] > LAYERS["data"]


@pytest.mark.parametrize("old", ["rectune.titles", "rectune.schema", "rectune.locks", "rectune.movielens"])
def test_the_top_level_has_no_old_module_paths(old):
    """Modules live in their layer; the paths from before the layers are gone, not aliased."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_check_reads_imports_from_the_package(tmp_path):
    """``from rectune import movielens`` names the module it imports, so the layer check sees it."""
    script = tmp_path / "script.py"
    script.write_text("from rectune import movielens\n")
    assert imports(script) == {"rectune.movielens"}


def test_packages_one_path_needs_are_imported_on_that_path_only():
    """duckdb (the rating store) and the openai stack (endpoints) load when used, so an install without them
    (a GPU kit) still builds the demo data, trains and evaluates locally."""
    import subprocess
    import sys

    modules = ["rectune.data.rating_store", "rectune.benchmarks.recbench.builder", "rectune.evaluation.endpoint",
               "rectune.evaluation.reports", "rectune.training.setup", "rectune.models.generation"]  # fmt: skip
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted({{'duckdb', 'openai'}} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]"
