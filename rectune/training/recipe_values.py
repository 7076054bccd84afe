"""Recipe values checked before anything loads: a value out of range is one line naming the key.

Transformers, TRL and PEFT check few of their numbers: ``lora_r: 0`` or ``per_device_train_batch_size:
0`` fail deep inside a library with a traceback, and ``learning_rate: .nan`` trains silently into NaN
weights. The ranges here are the ones every run needs, whatever the model or data.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import re
from typing import Any, NoReturn

from rectune.core.cli import SEED_MAX, home_path
from rectune.core.io import RecTuneError
from rectune.core.wandb_mode import names_problem
from rectune.models.template_options import check_template_options
from rectune.training.checkpointing_kwargs import checkpointing_problem
from rectune.training.model_init_kwargs import MAIN_ONLY

# key -> (smallest allowed value, why); None is allowed wherever the field's default is None
AT_LEAST = {
    "lora_r": (1, "a LoRA rank"),
    "per_device_train_batch_size": (1, "examples a step"),
    "per_device_eval_batch_size": (1, "examples a step"),
    "gradient_accumulation_steps": (1, "steps"),
    "num_generations": (2, "completions a prompt (GRPO compares them within a group)"),
    "max_completion_length": (1, "tokens"),
    "max_length": (16, "tokens (a chat prompt alone needs more)"),
    "num_iterations": (1, "passes over each generation"),
    "steps_per_generation": (1, "steps a generation serves (generation_batch_size over the batch, which TRL derives)"),
    "ref_model_sync_steps": (1, "steps between reference model updates"),
    "pad_to_multiple_of": (1, "(the multiple padded lengths round up to)"),
    "ddp_timeout": (1, "seconds (each collective of a distributed run waits that long, then fails)"),
    "max_train_samples": (1, "examples (none left nothing to train on)"),
    "early_stopping_patience": (1, "evaluations"),
    "num_generations_eval": (1, "completions a prompt"),
    # the upper bound two-sided GRPO clamps the probability ratio to: below 1, the ratio of 1 the sampling policy
    # has is clamped from the first step on, and tokens with a positive advantage get no gradient
    "delta": (1, "(an upper bound on the probability ratio, 1 before any update)"),
    # each was a traceback once training had begun: a modulo by zero at the first evaluation, torch's assertion
    # as the first batch was asked of the loader's workers
    "eval_accumulation_steps": (1, "(evaluation steps between moves of the predictions to the CPU)"),
    "dataloader_prefetch_factor": (1, "(batches each loader worker loads ahead)"),
}
POSITIVE = {"lora_alpha", "temperature", "num_train_epochs", "repetition_penalty"}
SEEDS = f"[0, {SEED_MAX}]"  # NumPy's: a seed outside raised when training started
INTERVALS = {
    "lora_dropout": "[0, 1)", "top_p": "(0, 1]", "min_p": "[0, 1]", "warmup_ratio": "[0, 1]", "seed": SEEDS,
    "data_seed": SEEDS, "top_entropy_quantile": "[0, 1]", "label_smoothing_factor": "[0, 1)",
    # Adam's decay rates: torch refused another as it built the optimizer, a traceback once the model had loaded
    "adam_beta1": "[0, 1)", "adam_beta2": "[0, 1)",
    # TR-DPO's mix of the policy into the reference model: outside, the reference is extrapolated past both
    "ref_model_mixup_alpha": "[0, 1]",
}  # fmt: skip
NOT_NEGATIVE = {
    "top_k",
    "adam_epsilon",
    "dataloader_num_workers",
    "learning_rate",
    "weight_decay",
    "max_grad_norm",
    "beta",
    "epsilon",
    "epsilon_high",
    "neftune_noise_alpha",
    "warmup_steps",
    "logging_steps",
    "save_steps",
}


# Words GRPOConfig (TRL 1.16) declares no choices for and its trainer reads only once training has begun: a value
# outside these was a ValueError at the first step, a traceback after the run had claimed its folder; and the one
# PEFT task a recommender's LoRA is for. By the config's class: SFTConfig's loss_type, with choices of its own, is
# another key. (A later TRL's new word needs adding here.)
WORDS = {
    "GRPOConfig": {
        "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"),
        "importance_sampling_level": ("token", "sequence"),
        "scale_rewards": ("group", "batch", "none"),  # YAML's true and false are TRL's group and none
        "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
        "vllm_mode": ("server", "colocate"),
    },
    # RecTune trains causal LMs: another PEFT task wraps the model for a head it has not (SEQ_CLS saves the
    # adapter with modules_to_save classifier and score, which merging then refuses)
    "ModelConfig": {"lora_task_type": ("CAUSAL_LM",)},
}


# key -> the names transformers mirrors it under (the parsed config holds both, whichever the recipe gave)
ALIASES = {"gradient_checkpointing_kwargs": ("activation_checkpointing_kwargs",)}

# key -> what to give; an empty name would point at the current directory (Path("") is ".")
NAMED = {
    "model_name_or_path": "name a model: a Hugging Face id, a model folder, or embedded:smollm2",
    "output_dir": "name the run's folder",
}


def check_values(
    configs: tuple[Any, ...], source: object, given: frozenset[str] = frozenset(), named: frozenset[str] = frozenset()
) -> None:
    """Refuse the first out-of-range value of ``configs``, naming where it was set: a flag of ``given`` on the
    command line, else ``source`` (the recipe, or the command line when there is none); a key transformers mirrors
    under another name is named as ``named`` (the keys given) has it."""

    def refuse(key: str, problem: str) -> NoReturn:
        key = next((alias for alias in ALIASES.get(key, ()) if alias in named), key)
        raise RecTuneError(f"command line: --{key}: {problem}" if key in given else f"{source}: key {key!r}: {problem}")

    for config in configs:
        for item in dataclasses.fields(config):
            value = getattr(config, item.name)
            problem = _problem(item.name, value)
            if isinstance(value, bool) and type(item.default) in (int, float):  # YAML's true is Python's 1
                problem = f"{str(value).lower()} is not a number"
            if problem:
                refuse(item.name, problem)
    for config in configs:
        words = next((WORDS[c.__name__] for c in type(config).__mro__ if c.__name__ in WORDS), {})
        for key, allowed in words.items():
            if getattr(config, key) not in allowed:
                refuse(key, f"{getattr(config, key)!r} is none of {', '.join(map(repr, allowed))}")
    for config in configs:
        revision = getattr(config, "model_revision", None)
        if revision not in ("main", None):
            refuse("model_revision", f"{revision!r}: {MAIN_ONLY}")
        if hasattr(config, "chat_template_kwargs"):  # TRL renders every prompt with them, from the first step on
            where = "command line" if "chat_template_kwargs" in given else source
            check_template_options(config.chat_template_kwargs, where)
        problem = _training_start_problem(config)
        if problem:
            refuse(*problem)
    reports = next((c.report_to for c in configs if hasattr(c, "report_to")), None) or []
    run = next((c for c in configs if hasattr(c, "wandb_project")), None)
    if run is not None and "wandb" in reports:  # W&B's own checks, which wandb.init made as the run began
        problem = names_problem(project=run.wandb_project)
        if problem:
            refuse("wandb_project", problem)
        problem = names_problem(tags=run.wandb_tags)
        if problem:
            refuse("wandb_tags", problem)
    steps = next((c.max_steps for c in configs if hasattr(c, "max_steps")), -1)
    if steps == 0 or steps < -1:
        refuse("max_steps", f"{steps} (give a number of steps, or -1 to train by epochs)")
    for key, what in NAMED.items():
        if any(hasattr(c, key) and not str(getattr(c, key) or "").strip() for c in configs):
            refuse(key, f"not set ({what})")


def keep_target_modules_listed(configs: tuple[Any, ...]) -> None:
    """Turn a ``lora_target_modules`` of one bare module name back into a list. TRL's ModelConfig unwraps a
    one-name list (``[q_proj]``, so that ``[all-linear]`` works) into the name alone, which PEFT matches as a
    regular expression against whole module names (``model.layers.0.self_attn.q_proj``): it matched none, a
    traceback. Listed, PEFT matches it as a name's last part, as it does two names."""
    for config in configs:
        targets = getattr(config, "lora_target_modules", None)
        if isinstance(targets, str) and re.fullmatch(r"\w+", targets):
            config.lora_target_modules = [targets]


def expand_home_paths(configs: tuple[Any, ...]) -> None:
    """Expand a leading ``~/`` in every string of ``configs`` (a dataset's ``data_files`` too), as transformers
    does for ``output_dir`` alone: ``data_files: ~/data/train_sft.jsonl`` was a file "not found"."""

    def expanded(value: Any) -> Any:
        if isinstance(value, str):
            return home_path(value)
        if isinstance(value, list):
            return [expanded(item) for item in value]
        if isinstance(value, dict):
            return {key: expanded(item) for key, item in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for item in dataclasses.fields(value):
                before = getattr(value, item.name, None)
                if (after := expanded(before)) != before:  # the others left untouched
                    setattr(value, item.name, after)
        return value

    for config in configs:
        expanded(config)


def check_reward_weights(weights: list[float] | None, rewards: list[str], source: object) -> None:
    """``reward_weights`` must give one finite weight per reward."""
    if weights is None:
        return
    if len(weights) != len(rewards):
        raise RecTuneError(
            f"{source}: key 'reward_weights': {len(weights)} weight(s) for {len(rewards)} reward(s) "
            f"({', '.join(rewards)})"
        )
    if not all(math.isfinite(w) for w in weights):
        raise RecTuneError(f"{source}: key 'reward_weights': every weight must be a finite number")
    # each reward lies in [-1, 1]: the total within the weights' summed sizes, its group variance within their square
    # (weights of 1e308 overflowed it, every advantage was 0 and the adapter learned nothing, without a word)
    total = sum(abs(w) for w in weights)  # inf, where math.fsum and ** raise on overflow
    if not math.isfinite(total * total):
        raise RecTuneError(f"{source}: key 'reward_weights': weights this large overflow the total reward's variance")


def _training_start_problem(config: Any) -> tuple[str, str] | None:
    """(key, what is wrong) for what transformers or torch would raise on as training starts: an ``optim_args``
    part that is no ``key=value``, a ``gradient_checkpointing_kwargs`` key checkpointing does not take, an
    ``lr_scheduler_kwargs`` key the schedule does not take, ..."""
    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    mode = getattr(config, "torch_compile_mode", None)
    if mode is not None and mode not in torch_compile_modes():
        return "torch_compile_mode", f"{mode!r} is none of torch's ({', '.join(torch_compile_modes())})"
    backend = getattr(config, "torch_compile_backend", None)
    if backend is not None and str(backend).upper() not in dynamo_backends():  # accelerate's ValueError, later
        return "torch_compile_backend", f"{backend!r} is none of {', '.join(dynamo_backends()).lower()}"
    if (getattr(config, "dataset_kwargs", None) or {}).get("skip_prepare_dataset"):  # TRL's collator then fails
        return "dataset_kwargs", "skip_prepare_dataset leaves RecTune's chat examples untokenized for the trainer"
    optim_args = getattr(config, "optim_args", None)
    for part in optim_args.replace(" ", "").split(",") if optim_args else []:
        if part.count("=") != 1:
            return "optim_args", f"{part!r} is no key=value (give them as 'a=1,b=2')"
    problem = _optimizer_problem(config) or _reporting_problem(config)
    if problem:
        return problem
    problem = checkpointing_problem(config)
    if problem:
        return "gradient_checkpointing_kwargs", problem
    given = getattr(config, "lr_scheduler_kwargs", None)
    if not isinstance(given, dict) or not given:
        return _schedule_problem(config)
    schedule = SchedulerType(config.lr_scheduler_type)
    parameters = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[schedule]).parameters
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
        return _schedule_problem(config)  # handed on whole (reduce_lr_on_plateau's to torch)
    takes = sorted(set(parameters) - {"optimizer", "num_warmup_steps", "num_training_steps"})
    unknown = sorted(set(given) - set(takes))
    if unknown:
        return "lr_scheduler_kwargs", (
            f"{unknown[0]!r} is no setting of the {schedule.value} schedule (it takes {', '.join(takes) or 'none'})"
        )
    return _schedule_problem(config)


def torch_compile_modes() -> list[str]:
    """The modes ``torch.compile`` takes (it raised on another as training began)."""
    import torch._inductor

    return list(torch._inductor.list_mode_options())


def dynamo_backends() -> list[str]:
    """The ``torch.compile`` backends accelerate takes (another raised as the trainer was built)."""
    from accelerate.utils import DynamoBackend

    return [backend.value for backend in DynamoBackend]


def _optimizer_problem(config: Any) -> tuple[str, str] | None:
    """The package an ``optim`` needs where it is not installed (an ImportError as training began)."""
    if not hasattr(config, "optim"):
        return None
    from transformers import Trainer

    try:
        Trainer.get_optimizer_cls_and_kwargs(config)
    except ImportError as err:
        return "optim", " ".join(str(err).split())
    except ValueError as err:  # grokadamw says so as a ValueError; others need the model, checked as it loads
        if "install" in str(err):
            return "optim", " ".join(str(err).split())
    return None


def _schedule_problem(config: Any) -> tuple[str, str] | None:
    """What the learning-rate schedule refuses as the trainer builds it, after the model has loaded: a setting it
    needs and was not given (``cosine_with_min_lr`` without ``min_lr``, ``warmup_stable_decay`` without
    ``num_decay_steps``), or values it takes apart (a polynomial decay's ``lr_end`` above the learning rate). The
    schedule is built here, with transformers' own function, over a torch optimizer of one parameter."""
    if not hasattr(config, "lr_scheduler_type"):
        return None
    import torch
    from transformers.optimization import get_scheduler

    steps = config.max_steps if config.max_steps > 0 else 1000  # an epoch's steps are not known before the data
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=config.learning_rate)
    given = config.lr_scheduler_kwargs if isinstance(config.lr_scheduler_kwargs, dict) else {}
    key = "lr_scheduler_kwargs" if given else "lr_scheduler_type"
    try:
        get_scheduler(
            config.lr_scheduler_type, optimizer, num_warmup_steps=config.get_warmup_steps(steps),
            num_training_steps=steps, scheduler_specific_kwargs=dict(given),
        )  # fmt: skip
    except (ValueError, TypeError, ArithmeticError) as err:
        schedule = getattr(config.lr_scheduler_type, "value", config.lr_scheduler_type)
        return key, f"the {schedule} schedule refuses these settings: {' '.join(str(err).split())}"
    return None


def _reporting_problem(config: Any) -> tuple[str, str] | None:
    """A ``report_to`` that names no integration of transformers, or one whose package is missing here (a ValueError
    or RuntimeError as the trainer was built, after the run had claimed its folder)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    for name in getattr(config, "report_to", None) or ():  # "all" and "none" are resolved to lists by now
        if name not in INTEGRATION_TO_CALLBACK:
            return "report_to", f"{name!r} is none of transformers' ({', '.join(INTEGRATION_TO_CALLBACK)})"
        if name not in get_available_reporting_integrations():
            return "report_to", f"{name} is not installed here (install it, or report to wandb or none)"
    return None


def _problem(key: str, value: Any) -> str | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if key in AT_LEAST and value < AT_LEAST[key][0]:
        least, unit = AT_LEAST[key]
        return f"{value} is below {least} {unit}"
    if key in POSITIVE and value <= 0:
        return f"{value} must be above 0"
    if key in NOT_NEGATIVE and value < 0:
        return f"{value} must not be negative"
    if key in INTERVALS and not inside(value, INTERVALS[key]):
        return f"{value} must lie in {INTERVALS[key]}"
    if key == "dataloader_num_workers" and value > usable_cpus():  # 100,000: 8 minutes of forking, no step
        return f"{value} is more than the {usable_cpus()} CPUs this process may use (each worker is a process)"
    return None


def usable_cpus() -> int:
    """The CPUs this process may run on (PyTorch's own ceiling on a data loader's workers)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def inside(value: float, interval: str) -> bool:
    """Whether ``value`` lies in ``interval``, written as ``"(0, 1]"`` (``inf`` for no bound)."""
    low_open, high_open = interval[0] == "(", interval[-1] == ")"
    low, high = (float(x) for x in interval[1:-1].split(","))
    return (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
