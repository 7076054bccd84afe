"""Run an Accelerate config's multi-process setup on CPU, through torchrun.

    python -m rectune.training.cpu_launch --config_file accelerate_configs/zero3.yaml [--num_processes 2] \\
        train/sft.py RECIPE [--flag value ...]

``accelerate launch`` starts CPU workers only through mpirun and sends DeepSpeed and FSDP configs
to GPU launchers. This reads the config file with Accelerate's own parser and turns it into the
environment ``accelerate launch`` would give its workers (Accelerate's ``prepare_*_env``), overrides
only the device keys (``--num_processes``, no mixed precision, DeepSpeed's CPU accelerator), and
starts the workers with ``torch.distributed.run`` (gloo, through ``torchrun_agent``), each through
``cpu_worker``. Used by ``make dist-cpu`` and the tests.

Accelerate runs CPU workers as ``MULTI_CPU`` (DDP) whatever an FSDP config says: FSDP needs GPUs.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys

from rectune.core.cli import ArgumentParser
from rectune.core.scratch import scratch_folder

PASSED_ON = (signal.SIGTERM, signal.SIGINT)


def free_port() -> int:
    """A TCP port nobody listens on now, so two launches on one machine do not collide."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker_environment(config_file: str, num_processes: int, script: str) -> dict[str, str]:
    """The environment ``accelerate launch`` would give the workers, with the device keys set for CPU."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    launch_args = launch_command_parser().parse_args(
        ["--config_file", config_file, "--num_processes", str(num_processes), "--mixed_precision", "no", script]
    )
    launch_args, defaults, _ = _validate_launch_command(launch_args)
    if launch_args.use_deepspeed:
        # what `accelerate launch` records before its DeepSpeed launcher (the config file's DeepSpeed keys)
        fields = [*(defaults.deepspeed_config if defaults else {}), "mixed_precision"]
        launch_args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(launch_args)
    else:
        env = prepare_multi_gpu_env(launch_args)
    # DeepSpeed's CPU accelerator falls back to gloo without oneCCL; one thread per worker on a small machine
    return {**env, "ACCELERATE_MIXED_PRECISION": "no", "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--config_file", required=True, help="an Accelerate config (accelerate_configs/*.yaml)")
    parser.add_argument("--num_processes", type=int, default=2)
    parser.add_argument("script", help="train/sft.py or train/grpo.py")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the recipe and its flags")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.config_file):
        parser.error(f"{args.config_file}: Accelerate config not found")
    env = worker_environment(args.config_file, args.num_processes, args.script)
    # torchrun's agent makes a log folder in $TMPDIR per launch and never removes it: one of ours instead
    with scratch_folder("rectune-launch-") as scratch:
        command = [sys.executable, "-m", "rectune.training.torchrun_agent", "--nproc_per_node", str(args.num_processes),
                   "--master_port", str(free_port()), "--log-dir", str(scratch / "torchelastic"),
                   "-m", "rectune.training.cpu_worker", args.script, *args.script_args]  # fmt: skip
        return run_passing_signals_on(command, env)


def run_passing_signals_on(command: list[str], env: dict[str, str]) -> int:
    """Run torchrun in a session of its own and pass it each SIGTERM and SIGINT this launcher gets, once:
    signalled with the launcher's process group, torchrun had it twice, and the second interrupted the wait its
    first began for the workers to save their step (``rectune.training.sigterm_checkpoint``); the launcher then
    exited by the signal, its scratch folder left behind. Returns torchrun's status, or 128 + the signal passed
    on where torchrun then failed (``torchrun_agent`` ends so once the workers have stopped)."""
    process = subprocess.Popen(command, env=env, start_new_session=True)
    passed: list[int] = []

    def pass_on(signum: int, _frame: object) -> None:
        passed.append(signum)
        process.send_signal(signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    try:
        status = process.wait()
        return 128 + passed[0] if passed and status != 0 else status
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
