"""constraints.txt pins the versions RecTune is tested with: one exact version a package, inside the range
pyproject.toml declares for it, and the version installed here (``make install`` installs with the pins)."""

import importlib.metadata

import tomllib
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def pinned() -> dict[str, str]:
    lines = [line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    pins = {}
    for line in lines:
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [line for lines in project["optional-dependencies"].values() for line in lines]
    return {canonicalize_name(r.name): r for r in map(Requirement, [*project["dependencies"], *extras])}


def test_each_pin_is_a_dependency_and_inside_its_declared_range():
    ranges = declared()
    assert {"transformers", "trl", "peft", "accelerate", "datasets"} <= set(pinned())
    for name, version in pinned().items():
        assert name in ranges, f"{name} is pinned but no dependency of the project"
        assert ranges[name].specifier.contains(version), f"{name}=={version} is outside {ranges[name]}"


def test_the_pinned_versions_are_the_ones_installed():
    for name, version in pinned().items():
        installed = importlib.metadata.version(name)
        assert installed == version, f"{name} {installed} is installed, constraints.txt pins {version}: make install"
