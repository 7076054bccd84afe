"""Every command in the README's and getting-started page's code blocks names a script, flag or make
target that exists: a command copied from the docs never fails on a name."""

import dataclasses
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT

PAGES = ["README.md", "docs/getting-started.md"]
SCRIPT = re.compile(r"^(?:train|evaluate|data_prep|perf)/\w+\.py$")


def commands(page: str) -> list[str]:
    """The shell commands of a page's ```bash blocks, continuation lines joined, comments and output left out."""
    found, block = [], None
    for line in (ROOT / page).read_text().splitlines():
        if line.startswith("```"):
            block = [] if block is None and line.strip() in ("```bash", "```sh") else None
            continue
        if block is None or line.startswith("$ ") or line.startswith("=="):
            continue
        text = line.split(" # ")[0].rstrip()
        if found and found[-1].endswith("\\"):
            found[-1] = found[-1][:-1] + " " + text.strip()
        elif text and not text.startswith("#"):
            found.append(text.strip())
    return found


def script_flags(script: str) -> set[str]:
    if script in ("train/sft.py", "train/grpo.py"):  # recipe scripts: every field of their argument dataclasses
        from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, SFTConfig

        from rectune.training.arguments import RftArguments, RunArguments

        kinds = (SFTConfig if script.endswith("sft.py") else GRPOConfig, ModelConfig, DatasetMixtureConfig)
        fields = {f.name for kind in (*kinds, RunArguments, RftArguments) for f in dataclasses.fields(kind)}
        return {f"--{name}" for name in fields}
    result = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, f"{script} --help failed: {result.stderr[-500:]}"
    return set(re.findall(r"--[a-z][\w-]*", result.stdout))


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", text, re.MULTILINE)) | set(re.findall(r"^([\w-]+)%:", text, re.MULTILINE))


@pytest.mark.integration  # runs each named script's --help
@pytest.mark.parametrize("page", PAGES)
def test_documented_commands_name_what_exists(page):
    targets, known = make_targets(), {}
    checked = 0
    for command in commands(page):
        words = shlex.split(command.replace("$(", "(").replace("${", "{"), posix=True)
        if "make" in words:
            for word in words[words.index("make") + 1 :]:
                if not word.startswith("-") and "=" not in word:
                    assert word in targets, f"{page}: `{command}`: no make target {word!r}"
                    checked += 1
        scripts = [word for word in words if SCRIPT.match(word)]
        for script in scripts:
            assert (ROOT / script).is_file(), f"{page}: `{command}`: no script {script}"
            flags = known.setdefault(script, script_flags(script))
            for word in words[words.index(script) + 1 :]:
                if word.startswith("--"):
                    flag = word.split("=")[0]
                    assert flag in flags or flag.replace("-", "_") in flags, (
                        f"{page}: `{command}`: {script} has no {flag}"
                    )
                    checked += 1
    assert checked > 0, f"{page}: no command checked"


def test_the_demo_takes_one_measured_time_wherever_it_is_given():
    """README, getting started, the docs' front page and the Makefile give the same minutes for `make demo`."""
    pages = [*PAGES, "docs/index.md"]
    given = {re.search(r"make demo .*\(~(\d+) min\)", (ROOT / page).read_text())[1] for page in pages} | {
        re.search(r"demo world, on CPU \((\d+) minutes", (ROOT / "Makefile").read_text())[1]
    }
    assert len(given) == 1, given
