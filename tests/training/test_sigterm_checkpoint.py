"""A SIGTERM while training (a scheduler's time limit, a preemption) saves the step under way as a checkpoint and
stops with status 143; the rerun resumes from that step. The run had stopped at once, and its rerun trained every
step since the last `save_steps` checkpoint again."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace

from conftest import ROOT, write_recipe
from test_training import grpo_recipe, sft_recipe

from rectune.core.io import UMASK
from rectune.training.resumable import checkpoint_problem
from rectune.training.sigterm_checkpoint import CheckpointOnSigterm

STOPPED = re.compile(r"stopped by SIGTERM after step (\d+) of 100000, saved as checkpoint-\1; run the same command")


def terminated_after(command: list, losses: int, group: bool = False) -> tuple[int, str]:
    """Run ``command``; once it has logged ``losses`` training losses, send SIGTERM (to its whole process group
    with ``group``, as Slurm signals every process of a job step). Returns its status and its output."""
    process = subprocess.Popen(
        [sys.executable, *map(str, command)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
    )  # fmt: skip
    watchdog = threading.Timer(600, os.killpg, (process.pid, signal.SIGKILL))  # a run that never stops fails
    watchdog.start()
    lines, logged = [], 0
    for line in process.stdout:
        lines.append(line)
        logged += "'loss'" in line
        if logged == losses and "'loss'" in line:
            os.killpg(process.pid, signal.SIGTERM) if group else process.send_signal(signal.SIGTERM)
    status = process.wait()
    watchdog.cancel()
    return status, "".join(lines)


def steps_logged(checkpoint):
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return [entry["step"] for entry in history if "loss" in entry]


def test_a_sigterm_saves_the_step_under_way_and_the_rerun_resumes_there(tmp_path, tiny_model, train_data):
    """With transformers' own `enable_jit_checkpoint` on, which RecTune's takes the place of (with it each process
    of a distributed run decides alone, and the stage was then saved as if its data had run out)."""
    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path / "sft.yaml", tiny_model, train_data, out, max_steps=100000, save_steps=100000,
                        enable_jit_checkpoint=True)  # fmt: skip
    status, output = terminated_after(["train/sft.py", recipe], losses=2)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    step = int(STOPPED.search(output).group(1))
    assert step >= 2 and "Traceback" not in output
    assert [p.name for p in out.glob("checkpoint-*")] == [f"checkpoint-{step}"]
    assert checkpoint_problem(out / f"checkpoint-{step}") is None
    assert steps_logged(out / f"checkpoint-{step}") == list(range(1, step + 1))
    assert not (out / "finished.json").exists() and not (out / "adapter_model.safetensors").exists()
    weights = out / f"checkpoint-{step}" / "adapter_model.safetensors"
    assert weights.stat().st_mode & 0o777 == 0o666 & ~UMASK  # readable as it was saved, not at the stage's end

    status, output = terminated_after(["train/sft.py", recipe], losses=1)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert f"resuming from {out / f'checkpoint-{step}'}" in output
    later = int(STOPPED.search(output).group(1))
    assert later > step and steps_logged(out / f"checkpoint-{later}") == list(range(1, later + 1))


def test_a_grpo_run_stops_so_too(tmp_path, tiny_model, train_data):
    out = tmp_path / "rft"
    recipe = grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, out, max_steps=100000, save_steps=100000)
    status, output = terminated_after(["train/grpo.py", recipe], losses=1)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    step = int(STOPPED.search(output).group(1))
    assert checkpoint_problem(out / f"checkpoint-{step}") is None
    assert steps_logged(out / f"checkpoint-{step}") == list(range(1, step + 1))


def test_processes_of_a_distributed_run_signalled_together_stop_at_one_step(tmp_path, tiny_model, train_data):
    """Slurm signals every process of a job step, and torchrun passes its own SIGTERM on to its workers."""
    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path / "sft.yaml", tiny_model, train_data, out, max_steps=100000, save_steps=100000)
    launch = ["-m", "rectune.training.cpu_launch", "--config_file", ROOT / "accelerate_configs/ddp.yaml",
              "--num_processes", "2", "train/sft.py", recipe]  # fmt: skip
    status, output = terminated_after(launch, losses=2, group=True)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    step = int(STOPPED.search(output).group(1))
    checkpoint = out / f"checkpoint-{step}"
    assert checkpoint_problem(checkpoint) is None, output[-3000:]
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert [p.name for p in out.glob("checkpoint-*")] == [checkpoint.name]
    assert output.count("SIGTERM: the step under way ends") == 1 and output.count("stopped by SIGTERM") == 1
    assert "Traceback" not in output, output[-3000:]  # torchrun's SignalException ended it in 30 lines of its code


def test_the_step_a_sigterm_comes_in_is_saved_and_the_last_for_a_single_process():
    callback, control = CheckpointOnSigterm(), SimpleNamespace(should_save=False, should_evaluate=True,
                                                               should_training_stop=False)  # fmt: skip
    args, state = SimpleNamespace(device="cpu"), SimpleNamespace(global_step=7)
    previous = signal.getsignal(signal.SIGTERM)
    callback.on_train_begin(args, state, control)
    try:
        callback.on_step_end(args, state, control)
        assert (control.should_save, control.should_training_stop, callback.stopped_at) == (False, False, None)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the same request again (torchrun's): no exit
        callback.on_step_end(args, state, control)
    finally:
        callback.on_train_end(args, state, control)
    assert signal.getsignal(signal.SIGTERM) is previous
    assert (control.should_save, control.should_evaluate, control.should_training_stop) == (True, False, True)
    assert callback.stopped_at == 7


def test_transformers_jit_checkpointing_gives_way_to_ours(tmp_path, tiny_model):
    """Left on, its handler (a timer, then a checkpoint request nobody reads) is the one ours puts back after
    training, and a SIGTERM then went to it."""
    from transformers import AutoModelForCausalLM, Trainer
    from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

    from rectune.training.arguments import RunArguments
    from rectune.training.recipes import parse_recipe

    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path=str(tiny_model), enable_jit_checkpoint=True,
                          max_steps=3, report_to=["none"])  # fmt: skip
    arguments = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
    training, *_ = parse_recipe(arguments, [str(recipe), "--output_dir", str(tmp_path / "out")])
    assert training.enable_jit_checkpoint is False
    before = signal.getsignal(signal.SIGTERM)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), args=training)
    assert signal.getsignal(signal.SIGTERM) is before
    assert not any(hasattr(callback, "jit_manager") for callback in trainer.callback_handler.callbacks)
