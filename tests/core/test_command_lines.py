"""Entry scripts' command lines: no prefix matching, and an unknown flag answered with the closest one."""

import json
import os
import subprocess
import sys

import pytest
from conftest import RELEASE, ROOT, run_script

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


@pytest.mark.parametrize(
    ("script", "args", "code", "said"),
    [
        ("train/sft.py", ["--help"], 0, "--train_data"),
        ("train/grpo.py", ["--help"], 0, "--train_data"),
        ("train/sft.py", ["missing.yaml"], 2, "error: missing.yaml: recipe file not found"),
        ("train/grpo.py", ["--config"], 2, "error: --config needs a recipe file (RECIPE.yaml)"),
        ("evaluate/run.py", ["--data", "d.jsonl", "--out", "r", "--k", "0"], 2,
         "argument --k: expected a number of at least 1, got 0"),
        ("evaluate/score.py", ["--data", "d.jsonl", "--predictions", "p", "--out", "s", "--k", "1001"], 2,
         "argument --k: expected a list of at most 1000 items, got 1001"),
        ("evaluate/run.py", ["--data", "missing.jsonl", "--out", "r", "--model", "m"], 2,
         "error: missing.jsonl: file not found"),
        ("evaluate/score.py", ["--data", "missing.jsonl", "--predictions", "p.jsonl", "--out", "s.json"], 2,
         "error: missing.jsonl: file not found"),
        ("train/merge.py", ["--adapters", "a", "--out", "m"], 2, "error: merging needs at least two adapters"),
    ],
)  # fmt: skip
def test_help_and_bad_input_answer_before_trl_and_torch_load(tmp_path, script, args, code, said):
    """--help and input refused on sight are answered without importing TRL or torch (most of ten seconds)."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{script!r}, *{args!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(ROOT / script)!r}, run_name='__main__')\n"
        "except SystemExit as end:\n"
        "    print('exit', end.code, 'trl' in sys.modules, 'torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert said in result.stdout + result.stderr, result.stdout[-1000:] + result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == f"exit {code} False False"


def test_a_path_whose_bytes_are_no_utf8_is_one_line_before_anything_is_written(tmp_path):
    """Linux takes any bytes in a name (a folder from a Latin-1 system); Python hands them on as lone surrogates,
    which no JSON record, report or card could encode: a traceback after the work, the report half written."""
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    folder.mkdir()
    (folder / "test.jsonl").write_text("{}\n")
    result = run_script("evaluate/score.py", "--data", folder / "test.jsonl", "--predictions", folder / "test.jsonl",
                        "--out", tmp_path / "s.json", check=False)  # fmt: skip
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f"error: {tmp_path}/caf\\xe9/test.jsonl: holds bytes that are no UTF-8; RecTune writes the paths it is given "
        "into its records (JSON, Markdown): rename it"
    )
    recipe = tmp_path / "r.yaml"  # a recipe's YAML may escape half a UTF-16 pair, as JSON may
    recipe.write_text('model_name_or_path: m\noutput_dir: "runs/caf\\uDCE9"\n')
    trained = run_script("train/sft.py", recipe, check=False)
    assert trained.returncode == 2 and trained.stderr.splitlines()[-1] == (
        f"error: {recipe}:2: 'runs/caf\\udce9': holds half of a UTF-16 pair, no character"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["caf\udce9", "r.yaml"]


def test_a_leading_tilde_the_shell_left_is_expanded_as_it_would_be(monkeypatch):
    from rectune.core.cli import expand_home

    monkeypatch.setenv("HOME", "/home/ada")
    given = ["--out=~/runs/a", "~/data/test.jsonl", "--stop", "~", "--stop=~", "a~/b", "~bob/x", "--k=~3", "~x"]
    assert expand_home(given) == [  # a lone ~ quoted past the shell is a stop string, not the home folder
        "--out=/home/ada/runs/a", "/home/ada/data/test.jsonl", "--stop", "~", "--stop=~", "a~/b", "~bob/x", "--k=~3",
        "~x",
    ]  # fmt: skip


def test_an_out_after_an_equals_sign_goes_home_not_into_a_folder_named_tilde(tmp_path, tiny_model, movie_data):
    """bash expands `~` only at a word's start: `--out=~/rep` reached the script as it is, and made `./~/rep` (one
    `rm -rf ~` from the home folder). Quoted, `--data "~/test.jsonl"` was a file "not found"."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (home / "data").mkdir(parents=True)
    for name in ("test.jsonl", "catalog.jsonl", "kg.jsonl"):
        (home / "data" / name).write_bytes((movie_data / name).read_bytes())
    run_script("evaluate/run.py", "--model", tiny_model, "--data", "~/data/test.jsonl", "--out=~/rep", "--no-wandb",
               "--max-new-tokens", "2", cwd=work, env={"HOME": str(home)})  # fmt: skip
    assert (home / "rep" / "report.json").is_file() and list(work.iterdir()) == []


@pytest.mark.parametrize("out", ["--out=~", "~", "~root/scores"])
def test_an_out_of_a_tilde_the_shell_left_is_refused_not_made_here(tmp_path, movie_data, out):
    """A lone `~` (`--out=~`, `--out "~"`) or `~user` reaches the script as it is, and `expand_home` expands `~/`
    alone: score.py wrote a file named `~` in the current folder, data_prep a folder (which `rm -rf ~` would take the
    home folder with)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    given = [out] if out.startswith("--") else ["--out", out]
    name = given[-1].removeprefix("--out=")
    first = name.split("/")[0]
    reads = os.path.expanduser(first) if first != "~" else str(home)
    words = (f"error: {name}: would be a folder named '{first}' in the current one, where the shell reads {first} as "
             f"{reads} (it was quoted, or came after '='); give the path you mean")  # fmt: skip
    data = movie_data / "test.jsonl"
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": json.loads(line)["id"], "completion": "Heat"}) + "\n"
                               for line in data.read_text().splitlines()))  # fmt: skip
    scored = run_script("evaluate/score.py", "--data", data, "--predictions", answers, *given, cwd=work,
                        env={"HOME": str(home)}, check=False)  # fmt: skip
    prepared = run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", *given, cwd=work,
                          env={"HOME": str(home)}, check=False)  # fmt: skip
    for result in (scored, prepared):
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == words
    assert list(work.iterdir()) == [] and list(home.iterdir()) == []
