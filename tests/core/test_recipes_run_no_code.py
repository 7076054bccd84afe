"""Code runs and uploads happen only from what the user typed: a recipe cannot run a model folder's Python,
load kernels from any Hub repository, import a module or upload to the Hub, the command line can (code
announced in one line), and no spelling of a secret flag reaches a file."""

import json
import logging
import shutil
import sys

import pytest
from conftest import run_script, write_recipe
from test_hostile import one_line
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, SFTConfig

from rectune.core.io import DataError, RecTuneError
from rectune.core.secrets import argv_redacted, redact_url, redacted_args
from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.recipe_trust import announce_code
from rectune.training.recipes import parse_recipe, resolved_recipe

SFT = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
GRPO = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments)


def planted_model(tmp_path, tiny_model):
    """The tiny model with an ``auto_map`` naming a module that leaves a marker when it is imported."""
    folder, marker = tmp_path / "stranger_model", tmp_path / "ran"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "planted.PlantedConfig", "AutoModelForCausalLM": "planted.PlantedModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "planted.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return folder, marker


def test_a_recipe_cannot_trust_remote_code(tmp_path, tiny_model, train_data):
    model, marker = planted_model(tmp_path, tiny_model)
    data = [{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}]
    recipe = write_recipe(
        tmp_path / "shared.yaml", model_name_or_path=str(model), output_dir=str(tmp_path / "run"), max_steps=1,
        trust_remote_code=True, report_to=["none"], datasets=data,
    )  # fmt: skip
    result = run_script("train/sft.py", recipe, check=False)
    one_line(result, "shared.yaml", "key 'trust_remote_code'", "--trust_remote_code true")
    assert not marker.exists() and not (tmp_path / "run").exists()

    # typed by the user, it is announced, and the folder's code does run (what the recipe was refused)
    typed = write_recipe(
        tmp_path / "typed.yaml", model_name_or_path=str(model), output_dir=str(tmp_path / "typed_run"), max_steps=1,
        report_to=["none"], datasets=data, use_peft=True,
    )  # fmt: skip
    result = run_script("train/sft.py", typed, "--trust_remote_code", "true", check=False)
    assert "trust_remote_code (command line): the model folder's own Python will run" in result.stderr
    assert marker.exists()


def test_nested_trust_remote_code_and_foreign_rewards_are_refused_in_recipes(tmp_path):
    nested = write_recipe(tmp_path / "nested.yaml", model_init_kwargs={"trust_remote_code": True})
    with pytest.raises(DataError, match=r"nested.yaml: key 'model_init_kwargs.trust_remote_code': a recipe cannot"):
        parse_recipe(SFT, [str(nested)])
    foreign = write_recipe(tmp_path / "foreign.yaml", reward_funcs=["recall", "my_pkg.rewards.novelty"])
    with pytest.raises(DataError, match=r"key 'reward_funcs': 'my_pkg.rewards.novelty' would import code"):
        parse_recipe(GRPO, [str(foreign)])
    own = write_recipe(
        tmp_path / "own.yaml",
        model_name_or_path="m",
        reward_funcs=["recall", "rectune.training.learn_check.answer_length"],
    )
    *_, rft_args, _ = parse_recipe(GRPO, [str(own), "--output_dir", str(tmp_path / "o")])
    assert rft_args.reward_funcs[1] == "rectune.training.learn_check.answer_length"


def test_code_typed_on_the_command_line_is_announced_once(tmp_path, caplog):
    parsed = parse_recipe(
        GRPO,
        ["--model_name_or_path", "m", "--output_dir", str(tmp_path / "o"), "--trust_remote_code", "true"]
        + ["--reward_funcs", "recall", "my.r"],
    )
    with caplog.at_level(logging.WARNING, logger="rectune.training.recipes"):
        announce_code(parsed[:-1])
    assert caplog.messages == [
        "trust_remote_code (command line): the model folder's own Python will run",
        "reward my.r (command line): importing its module",
    ]


def test_a_secret_in_model_init_kwargs_on_the_command_line_is_refused(tmp_path):
    with pytest.raises(RecTuneError, match="model_init_kwargs: 'token' would be saved with the run") as caught:
        parse_recipe(
            SFT,
            ["--model_name_or_path", "m", "--output_dir", str(tmp_path)]
            + ["--model_init_kwargs", '{"token": "hf_secretPlanted"}'],
        )
    assert "hf_secretPlanted" not in str(caught.value)


@pytest.mark.parametrize("spelling", ["--hub-token", "--hub_token"])
def test_every_spelling_of_the_hub_token_moves_out(monkeypatch, spelling):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["sft.py", "--model_name_or_path", "m", "--output_dir", "out", spelling, "hf_planted", "--report_to", "none"]
    monkeypatch.setattr(sys, "argv", argv)
    training_args, *_ = parse_recipe(SFT)
    assert training_args.hub_token is None
    assert sys.argv == ["sft.py", "--model_name_or_path", "m", "--output_dir", "out", "--report_to", "none"]


def test_urls_lose_every_userinfo_and_query_value():
    # a password holding "@", a key under a name no list would guess, a bare parameter
    assert redact_url("see http://us:p@ssSECRET1@host:8/v1?code=SECRET2&x&y=2 then") == (
        "see http://***@host:8/v1?code=***&***&y=*** then"
    )
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"  # nothing to hide
    assert redacted_args(["--base-url", "http://u:K@h/v1?k=K", "--hub-token", "hf_x", "--api_key=abc", "-m", "x"]) == [
        "--base-url", "http://***@h/v1?k=***", "--hub-token", "***", "--api_key=***", "-m", "x",
    ]  # fmt: skip


def test_the_command_line_is_redacted_only_while_wandb_starts(monkeypatch):
    argv = ["run.py", "--base-url", "http://u:KEY@h/v1"]
    monkeypatch.setattr(sys, "argv", list(argv))
    with argv_redacted():
        assert sys.argv == ["run.py", "--base-url", "http://***@h/v1"]
    assert sys.argv == argv


def test_a_recipe_cannot_load_kernels_from_any_hub_repository(tmp_path, caplog):
    recipe = write_recipe(
        tmp_path / "kernel.yaml",
        attn_implementation="someone/flash-attn",
        model_init_kwargs={"allow_all_kernels": True},
    )
    with pytest.raises(
        DataError, match=r"kernel.yaml: key 'model_init_kwargs.allow_all_kernels': a recipe cannot load"
    ):
        parse_recipe(SFT, [str(recipe)])
    typed = ["--model_init_kwargs", '{"allow_all_kernels": true}']  # the user's own choice: announced
    parsed = parse_recipe(SFT, ["--model_name_or_path", "m", "--output_dir", str(tmp_path / "o"), *typed])
    with caplog.at_level(logging.WARNING, logger="rectune.training.recipes"):
        announce_code(parsed[:-1])
    assert caplog.messages == ["allow_all_kernels (command line): attention kernels load from any Hub repository"]


@pytest.mark.parametrize(
    ("key", "value"),
    [("push_to_hub", True), ("trackio_space_id", "someone/board"), ("trackio_bucket_id", "b"),
     ("log_completions_hub_repo", "someone/completions")],  # GRPO's prompts and completions, a public dataset
)  # fmt: skip
def test_a_recipe_cannot_upload_under_your_login(tmp_path, key, value):
    recipe = write_recipe(tmp_path / "up.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"), **{key: value})
    with pytest.raises(DataError, match=rf"up.yaml: key '{key}': a recipe cannot upload to the Hub under your login"):
        parse_recipe(GRPO, [str(recipe)])


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("hub_model_id", "acme/leak", "send your uploads to 'acme'"),
     ("hub_private_repo", False, "make your uploads public"),
     ("trackio_static_space_id", "acme/board", "send your uploads to 'acme'")],
)  # fmt: skip
def test_a_recipe_cannot_say_where_an_upload_goes_or_make_it_public(tmp_path, key, value, words):
    """--push_to_hub typed by the user, and a stranger's recipe chose the organisation or made the repository public."""
    recipe = write_recipe(tmp_path / "up.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"), **{key: value})
    with pytest.raises(DataError, match=rf"up.yaml: key '{key}': a recipe cannot {words}; give --{key} on the command"):
        parse_recipe(GRPO, [str(recipe)])
    # typed, each is the user's: kept for this run, left out of recipe.yaml (rerunning it uploads only when asked)
    args = ["--model_name_or_path", "m", "--output_dir", str(tmp_path / "o"), f"--{key}", str(value).lower()]
    assert getattr(parse_recipe(GRPO, args)[0], key) == value
    assert key not in resolved_recipe(GRPO, args)


@pytest.mark.parametrize(
    ("value", "refused"),
    [("comet_ml", "comet_ml"), (["wandb", "neptune"], "neptune"), ("mlflow", "mlflow"), (["dvclive"], "dvclive"),
     ("all", "all")],  # every integration installed
)  # fmt: skip
def test_a_recipe_reports_only_to_wandb_tensorboard_or_trackio(tmp_path, value, refused):
    """Comet, Neptune and the like log under the user's login; MLflow and DVCLive write where the run is started."""
    out = str(tmp_path / "o")
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=out, report_to=value)
    with pytest.raises(
        DataError,
        match=rf"r.yaml: key 'report_to': a recipe cannot report the run to '{refused}' "
        r"\(a recipe reports to wandb, tensorboard, trackio, none\); give --report_to",
    ):
        parse_recipe(GRPO, [str(recipe)])
    kept = write_recipe(tmp_path / "k.yaml", model_name_or_path="m", output_dir=out, report_to=["wandb"])
    assert parse_recipe(GRPO, [str(kept)])[0].report_to == ["wandb"]
    typed = [
        str(kept),
        "--report_to",
        "comet_ml",
    ]  # the user's own choice: past the recipe's rule, to the install check
    with pytest.raises(RecTuneError, match=r"command line: --report_to: comet_ml is not installed here"):
        parse_recipe(GRPO, typed)


def test_an_upload_typed_on_the_command_line_runs_and_stays_out_of_the_resolved_recipe(tmp_path):
    out = str(tmp_path / "o")
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=out, hub_model_id="run")
    quiet = write_recipe(tmp_path / "quiet.yaml", model_name_or_path="m", output_dir=out, push_to_hub=False)
    assert parse_recipe(SFT, [str(quiet)])[0].push_to_hub is False  # saying no is no upload
    args = [str(recipe), "--push_to_hub", "true"]
    assert parse_recipe(SFT, args)[0].push_to_hub is True
    # recipe.yaml reproduces the training; rerunning it uploads only when asked again
    assert resolved_recipe(SFT, args) == {"model_name_or_path": "m", "output_dir": out}
    assert parse_recipe(SFT, args)[0].hub_model_id == "run"  # a bare name: the user's own namespace


def test_a_recipe_cannot_choose_a_checkpoint_to_resume_from(tmp_path, caplog):
    """A run resumed goes on from the weights, optimizer state and step of the folder named: the user's choice,
    typed, never a recipe's (its DeepSpeed states load as data: tests/training/test_resumable.py)."""
    checkpoint = tmp_path / "theirs" / "checkpoint-5"
    (checkpoint / "global_step5").mkdir(parents=True)
    out = str(tmp_path / "o")
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=out,
                          resume_from_checkpoint=str(checkpoint))  # fmt: skip
    with pytest.raises(
        DataError,
        match=r"r.yaml: key 'resume_from_checkpoint': a recipe cannot choose a checkpoint "
        r"to resume from \(the run would go on from the weights and step of any folder it names\); pass "
        r"--resume_from_checkpoint$",
    ):
        parse_recipe(SFT, [str(recipe)])
    typed = ["--model_name_or_path", "m", "--output_dir", out, "--resume_from_checkpoint", str(checkpoint)]
    parsed = parse_recipe(SFT, typed)  # the user's own choice, and no code: nothing to announce
    assert parsed[0].resume_from_checkpoint == str(checkpoint) and "resume_from_checkpoint" not in resolved_recipe(
        SFT, typed
    )
    with caplog.at_level(logging.WARNING, logger="rectune.training.recipes"):
        announce_code(parsed[:-1])
    assert caplog.messages == []


def test_a_recipe_cannot_configure_deepspeed(tmp_path):
    # DeepSpeed's flops profiler opens its output_file for writing: a shared recipe could overwrite any file
    notes = tmp_path / "notes.txt"
    recipe = write_recipe(
        tmp_path / "ds.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"),
        deepspeed={"zero_optimization": {"stage": 0}, "flops_profiler": {"enabled": True, "output_file": str(notes)}},
    )  # fmt: skip
    with pytest.raises(DataError, match=r"ds.yaml: key 'deepspeed': a recipe cannot configure DeepSpeed"):
        parse_recipe(SFT, [str(recipe)])


@pytest.mark.parametrize(
    ("key", "value", "host"),
    [("vllm_server_host", "gpu7.example.org", "gpu7.example.org"),
     ("vllm_server_base_url", "http://10.1.2.3:8000", "10.1.2.3"),
     ("vllm_server_base_url", "https://user@LOCALHOST.evil.org/v1", "localhost.evil.org")],
)  # fmt: skip
def test_a_recipe_cannot_send_prompts_and_weights_to_another_machine(tmp_path, key, value, host):
    recipe = write_recipe(tmp_path / "v.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"), **{key: value})
    with pytest.raises(DataError, match=rf"v.yaml: key '{key}': a recipe cannot send .* another machine \('{host}'\)"):
        parse_recipe(GRPO, [str(recipe)])


def test_a_vllm_server_on_this_machine_is_a_recipe_setting_and_another_one_a_typed_one(tmp_path):
    out = str(tmp_path / "o")
    for key, value in [("vllm_server_host", "127.0.0.1"), ("vllm_server_host", "localhost"),
                       ("vllm_server_base_url", "http://[::1]:8000")]:  # fmt: skip
        recipe = write_recipe(tmp_path / "v.yaml", model_name_or_path="m", output_dir=out, **{key: value})
        assert getattr(parse_recipe(GRPO, [str(recipe)])[0], key) == value
    typed = parse_recipe(GRPO, [str(recipe), "--vllm_server_base_url", "http://gpu7.example.org:8000"])
    assert typed[0].vllm_server_base_url == "http://gpu7.example.org:8000"
