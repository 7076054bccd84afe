"""The library's layers: ``ls rectune/`` shows the pipeline, and no module imports a layer above its own.

    core < data < benchmarks < models < training, evaluation

Every import counts, inside functions too; training and evaluation never import each other. Old
top-level module paths (``rectune.titles``, ``rectune.schema``) still import from their new homes.
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
        if isinstance(node, ast.ImportFrom) and node.module:
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
            continue  # rectune/__init__.py: the old paths' table names modules, imports none
        own = parts[0]
        for module in imports(path):
            other = layer_of(module)
            assert other is not None, f"{path}: {module} is in no layer"
            assert LAYERS[other] <= LAYERS[own], f"{path} ({own}) imports {module} ({other}), a layer above"
            assert {own, other} != {"training", "evaluation"}, f"{path} ({own}) imports {module} ({other})"
        checked += 1
    assert checked > 50


def test_the_check_catches_an_upward_import(tmp_path):
    """The rule above is not vacuous: a data module importing training is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rectune.training.recipes import parse_recipe\n")
    (module,) = imports(bad)
    assert LAYERS[layer_of(module)] > LAYERS["data"]


@pytest.mark.parametrize(
    ("old", "name", "home"),
    [
        ("rectune.titles", "TitleMatcher", "rectune.data.titles"),
        ("rectune.schema", "load_rows", "rectune.benchmarks"),
        ("rectune.schema", "RowChecker", "rectune.data.rows"),
        ("rectune.rewards", "completion_text", "rectune.data.completions"),
        ("rectune.evaluation", "evaluate_checkpoint", "rectune.evaluation.reports"),
        ("rectune.models", "resolve_model_name", "rectune.models.embedded"),
        ("rectune.training", "save_stage", "rectune.training.setup"),
    ],
)
def test_old_import_paths_still_work(old, name, home):
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(home), name)
