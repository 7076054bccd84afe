"""What a recipe may not do and the command line may: a recipe is data, often a stranger's.

A recipe cannot run code (a model folder's own Python, an attention kernel from any Hub repository, a
reward imported from outside RecTune), send the user's model, prompts or logs elsewhere (uploads to the
Hub under the user's login, a vLLM server on another machine, a tracking service other than W&B), make
the run write outside its own folder (DeepSpeed's flops profiler and monitors write to the paths its config
names, overwriting what is there), let it write into folders RecTune did not make, or hold what a terminal acts
on (its paths and names are printed). Typed on the command line, each works, and settings that run foreign code
are announced in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rectune.core.escaping import terminal_control
from rectune.core.io import DataError

log = logging.getLogger(__name__)

COMMAND_LINE_ONLY = {
    "overwrite": "a recipe cannot let a run write into folders RecTune did not make; pass --overwrite",
    "deepspeed": "a recipe cannot configure DeepSpeed, whose config writes files at paths it names (the flops "
    "profiler's output_file, monitors' output_path, NVMe offload); launch with an accelerate_configs/zero*.yaml "
    "or pass --deepspeed",
    # a run resumed carries on from another folder's weights, optimizer state and step: the user's choice
    "resume_from_checkpoint": "a recipe cannot choose a checkpoint to resume from (the run would go on from the "
    "weights and step of any folder it names); pass --resume_from_checkpoint",
}
RUNS_CODE = "trust_remote_code"
OWN_PACKAGE = "rectune."  # RecTune's own rewards import nothing foreign
# With this, transformers loads an attn_implementation's compiled kernel from any Hub repository, not only
# from kernels-community: code from a name the recipe chose
ANY_HUB_KERNEL = "allow_all_kernels"
# Uploads of the model, the run's logs or GRPO's prompts and completions under the user's own login, public
# unless the account's default is private
UPLOADS = ("push_to_hub", "trackio_space_id", "trackio_bucket_id", "log_completions_hub_repo")
# Where such an upload goes and who may see it: a recipe's `hub_model_id: some-org/name` sent an upload the
# command line asked for into any organisation the user may write to, and `hub_private_repo: false` made it public
# where the account's default is private. A bare name (the user's own namespace), as open-r1's recipes give, is kept
UPLOAD_PLACES = ("hub_model_id", "trackio_static_space_id")
PUBLIC = "hub_private_repo"
# Where a recipe may report the run's logs: W&B (RecTune's own tracking), TensorBoard (into the run's folder) and
# Trackio (on this machine; its Space and bucket uploads are refused above). transformers' others report to a
# service under the user's login (Comet, Neptune, ClearML, SwanLab, AzureML, DagsHub, Flyte, Kubeflow), ask a web
# service where the machine is (CodeCarbon) or write where the process happens to run (MLflow's ./mlruns,
# DVCLive's ./dvclive and its git experiments); "all" names every one installed
RECIPE_REPORTS = ("wandb", "tensorboard", "trackio", "none")
REPORTS = "report_to"
# GRPO's vLLM server receives every prompt and, after each step, the policy's weights
SERVERS = ("vllm_server_host", "vllm_server_base_url")
LOOPBACK = {"localhost", "0.0.0.0", "::1", "::"}
# rerunning recipe.yaml uploads only when asked again, and where the command line says
LEFT_OUT_OF_SAVED_RECIPES = (*COMMAND_LINE_ONLY, *UPLOADS, *UPLOAD_PLACES, PUBLIC)


def refuse_untrusted(recipe: Path, key: str, value: Any) -> None:
    """Stop in one line naming the recipe and key when the recipe asks for what only the command line may."""
    if key in COMMAND_LINE_ONLY:
        raise DataError(recipe, f"key {key!r}: {COMMAND_LINE_ONLY[key]}")
    if key in UPLOADS and value not in (None, False):
        raise DataError(
            recipe, f"key {key!r}: a recipe cannot upload to the Hub under your login (public unless your "
            f"account's default is private); give --{key} on the command line"
        )  # fmt: skip
    if (key in UPLOAD_PLACES and isinstance(value, str) and "/" in value) or (key == PUBLIC and value is False):
        what = "make your uploads public" if key == PUBLIC else f"send your uploads to {value.split('/')[0]!r}"
        raise DataError(recipe, f"key {key!r}: a recipe cannot {what}; give --{key} on the command line")
    if key == REPORTS:
        _refuse_reports(recipe, value)
    host = _remote_host(value) if key in SERVERS and isinstance(value, str) else None
    if host:
        raise DataError(
            recipe, f"key {key!r}: a recipe cannot send your prompts and weights to another machine ({host!r}); "
            f"give --{key} on the command line"
        )  # fmt: skip
    _refuse_code(recipe, key, value)
    _refuse_terminal_controls(recipe, key, value)


def _refuse_terminal_controls(recipe: Path, key: str, value: Any) -> None:
    """A recipe's paths and names reach the terminal as they are (``saved the SFT adapter to OUTPUT_DIR`` is
    printed, not logged): an escape sequence in an ``output_dir`` retitled the terminal or wrote its clipboard
    (OSC 52), a bidirectional override showed the line in another order. Tabs and line breaks are text."""
    for text in _texts(value):
        found = terminal_control(text)
        if found:
            raise DataError(
                recipe, f"key {key!r}: holds {found!r}, a character a terminal acts on rather than shows (a recipe's "
                "paths and names are printed); a recipe's text holds none"
            )  # fmt: skip


def _texts(value: Any) -> Iterator[str]:
    """Every string in a recipe's value, the keys of its mappings too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner_key, inner in value.items():
            yield from _texts(inner_key)
            yield from _texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _texts(inner)


def _refuse_reports(recipe: Path, value: Any) -> None:
    for name in value if isinstance(value, list) else [value]:
        if isinstance(name, str) and name not in RECIPE_REPORTS:
            raise DataError(
                recipe, f"key {REPORTS!r}: a recipe cannot report the run to {name!r} (a recipe reports to "
                f"{', '.join(RECIPE_REPORTS)}); give --{REPORTS} on the command line"
            )  # fmt: skip


def _remote_host(address: str) -> str | None:
    """The host an address names, or None when it is this machine."""
    host = (urlsplit(address).hostname if "://" in address else address.strip().strip("[]")) or ""
    return None if host.lower() in LOOPBACK or host.startswith("127.") else host


def _refuse_code(recipe: Path, key: str, value: Any) -> None:
    if key == RUNS_CODE or (isinstance(value, dict) and RUNS_CODE in value):
        where = key if key == RUNS_CODE else f"{key}.{RUNS_CODE}"
        raise DataError(
            recipe, f"key {where!r}: a recipe cannot run a model folder's own Python; if you trust that "
            f"folder, pass --{RUNS_CODE} true on the command line"
        )  # fmt: skip
    if isinstance(value, dict) and ANY_HUB_KERNEL in value:
        raise DataError(
            recipe, f"key '{key}.{ANY_HUB_KERNEL}': a recipe cannot load compiled kernels from any Hub repository; "
            f"if you trust its attn_implementation, pass --{key} '{{\"{ANY_HUB_KERNEL}\": true}}' on the command line"
        )  # fmt: skip
    if key == "reward_funcs":
        for name in value if isinstance(value, list) else [value]:
            if isinstance(name, str) and "." in name and not name.startswith(OWN_PACKAGE):
                raise DataError(
                    recipe, f"key 'reward_funcs': {name!r} would import code from a recipe; if you trust "
                    f"that module, name it on the command line (--reward_funcs ... {name})"
                )  # fmt: skip


def announce_code(parsed: tuple[Any, ...]) -> None:
    """One line for each setting from the command line that runs code other than RecTune's."""
    lines = {}  # ModelConfig and the trainer's config both hold trust_remote_code: one line for both
    for config in parsed:
        init = getattr(config, "model_init_kwargs", None) or {}
        if getattr(config, RUNS_CODE, False) or init.get(RUNS_CODE):
            lines[RUNS_CODE] = "trust_remote_code (command line): the model folder's own Python will run"
        if init.get(ANY_HUB_KERNEL):
            lines[ANY_HUB_KERNEL] = "allow_all_kernels (command line): attention kernels load from any Hub repository"
        for name in getattr(config, "reward_funcs", None) or []:
            if "." in name and not name.startswith(OWN_PACKAGE):
                lines[name] = f"reward {name} (command line): importing its module"
    for line in lines.values():
        log.warning(line)
