"""Entry scripts' command lines: no prefix matching, and an unknown flag answered with the closest one."""

import subprocess
import sys

import pytest
from conftest import ROOT, run_script

from rectune.core.cli import ArgumentParser


def test_a_prefix_is_not_a_flag_and_the_closest_flag_is_suggested(capsys):
    parser = ArgumentParser(prog="compare.py")
    parser.add_argument("--baseline")
    parser.add_argument("--bootstrap-samples", type=int)
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["--baselin", "base"])  # argparse's default would read it as --baseline
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "compare.py: error: unrecognized arguments: --baselin base; did you mean --baseline?"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--zzz"])
    assert capsys.readouterr().err.strip().endswith("unrecognized arguments: --zzz")  # nothing close: no guess


@pytest.mark.parametrize(
    ("script", "args", "suggestion"),
    [
        ("evaluate/compare.py", ["r", "--baselin", "base"], "did you mean --baseline?"),
        ("evaluate/score.py", ["--data", "d", "--predictions", "p", "--out", "o", "--alow-subset"],
         "did you mean --allow-subset?"),
        ("data_prep/recbench.py", ["--src", "s", "--domain", "movie", "--out", "o", "--candidate", "5"],
         "did you mean --candidates?"),
    ],
)  # fmt: skip
def test_entry_scripts_refuse_prefixes_in_one_line(tmp_path, script, args, suggestion):
    result = run_script(script, *args, check=False, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(suggestion)


@pytest.mark.parametrize("script", ["train/sft.py", "train/grpo.py"])
def test_training_help_answers_before_trl_and_torch_load(script):
    """--help prints the short help without importing TRL or torch (which take most of half a minute)."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{script!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({script!r}, run_name='__main__')\n"
        "except SystemExit as end:\n"
        "    print('exit', end.code, 'trl' in sys.modules, 'torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert "usage:" in result.stdout and "--train_data" in result.stdout, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "exit 0 False False"
