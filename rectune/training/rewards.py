"""Reward lookup for GRPO: a benchmark's rewards by name, or any function by dotted import path.

A reward is a plain function in TRL's signature, ``f(completions, <label columns>, **kwargs)``,
returning one float (or ``None``: not applicable) per completion. A reward that takes a
``resources`` keyword gets the data's :class:`~rectune.benchmarks.Resources` (catalog, KG) bound
here; TRL logs each reward under its function's name.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from pathlib import Path

from rectune.benchmarks import Benchmark, Resources, RewardFunc, get_benchmark
from rectune.core.io import DataError, RecTuneError, numbered_jsonl
from rectune.data.prompt_options import recorded_prompt


def import_reward(path: str) -> RewardFunc:
    """``my_pkg.rewards.novelty`` -> that function (the working directory is importable, as in TRL's script)."""
    module_name, _, attribute = path.rpartition(".")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        func = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise RecTuneError(f"reward {path!r}: cannot import it ({err})") from None
    if not callable(func):
        raise RecTuneError(f"reward {path!r} is not a function")
    return func


def bind_resources(func: RewardFunc, resources: Resources) -> RewardFunc:
    """``func`` with ``resources`` bound when it takes that keyword; its name is kept for TRL's logs."""
    if "resources" not in inspect.signature(func).parameters:
        return func
    bound = functools.partial(func, resources=resources)
    return functools.update_wrapper(bound, func)


def resolve_rewards(benchmark: Benchmark, names: list[str], resources: Resources) -> tuple[list[RewardFunc], list[str]]:
    """The reward callables for ``names`` (the benchmark's defaults when empty) and the names used."""
    names = list(names) or list(benchmark.default_rewards)
    twice = next((name for number, name in enumerate(names) if name in names[:number]), None)
    if twice is not None:  # TRL summed it twice and logged it under one name: weighted double, without a word
        raise RecTuneError(f"reward_funcs: {twice!r} is given twice; weigh a reward with reward_weights instead")
    funcs = []
    for name in names:
        if name in benchmark.rewards:
            func = benchmark.rewards[name]
        elif "." in name:
            func = import_reward(name)
        else:
            raise RecTuneError(
                f"unknown {benchmark.name} reward {name!r}; choose from {', '.join(benchmark.rewards)} "
                "or give a dotted import path (my_pkg.rewards.novelty)"
            )
        funcs.append(bind_resources(func, resources))
    return funcs, names


def rft_resources(
    data_file: str | os.PathLike, catalog: str | None = None, kg: str | None = None
) -> tuple[Benchmark, Resources]:
    """The benchmark of ``data_file``'s rows (of the rows a view derives from) and its resources: catalog and KG
    found beside it, the prompt options (fixed K for rewards at K, the ReRec protocol) from its ``stats.json``."""
    from rectune.training.views import view_source

    source = view_source(Path(data_file))
    data_file = source[0] if source else data_file
    first = numbered_jsonl(data_file)[0][1]
    try:
        benchmark = get_benchmark(first.get("benchmark"))
    except RecTuneError as err:
        raise DataError(data_file, f"field 'benchmark': {err}", line=1) from None
    variant = recorded_prompt(data_file)
    return benchmark, Resources(data_file, catalog, kg, top_k=variant.get("k"), variant=variant)


def rft_rewards(
    names: list[str], data_file: str | os.PathLike, catalog: str | None = None, kg: str | None = None
) -> tuple[list[RewardFunc], list[str]]:
    """The rewards ``names`` of the benchmark of ``data_file``, bound to its resources (:func:`rft_resources`)."""
    benchmark, resources = rft_resources(data_file, catalog, kg)
    return resolve_rewards(benchmark, names, resources)
