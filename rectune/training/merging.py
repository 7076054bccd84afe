"""Merge LoRA adapters trained on different formats or tasks, through PEFT's ``add_weighted_adapter``.

Methods: ``linear`` is the exact weighted sum of the adapters' weight deltas (sum_i w_i * B_i A_i,
PerRecBench's weight averaging; PEFT's ``cat``, whose rank is the sum of the input ranks; PEFT's own
``linear`` averages A and B separately, which only approximates it); ``ties`` and ``dare_ties``
(``density`` = share of each delta kept) and ``svd`` (the weighted sum re-factored to ``svd_rank``).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from rectune.core.io import DataError, RecTuneError, read_json
from rectune.core.kept_inputs import refuse_outputs_over_inputs
from rectune.core.outputs import claim_output, output_set
from rectune.models.chat_format import check_vocabulary, load_tokenizer
from rectune.models.checkpoints import adapter_chain, check_adapters_fit, load_merged, peft_loading
from rectune.models.hub import check_model_available
from rectune.models.model_folders import check_weights
from rectune.models.sharing import make_portable, record_chain

ADAPTER_KIND, MODEL_KIND = "merged adapter", "merged model"
METHODS = {"linear": "cat", "ties": "ties", "dare_ties": "dare_ties", "svd": "svd"}
LORA_MATRIX = re.compile(r"\.(lora_[AB]\.weight|lora_embedding_[AB])$")  # what add_weighted_adapter combines


def merge_adapters(
    adapters: list[str],
    out: str | os.PathLike,
    weights: list[float] | None = None,
    method: str = "linear",
    density: float | None = None,
    svd_rank: int | None = None,
    full_model: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Write the merged adapter to ``out`` (and the base with it merged in to ``full_model``).

    Each output folder is built whole beside its target and swapped in; a folder holding anything
    but an earlier merge's files (by its ``.rectune.json``) is refused unless ``overwrite``.
    """
    if len(adapters) < 2:
        raise RecTuneError("merging needs at least two adapters")
    if method not in METHODS:
        raise RecTuneError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    for flag, value, takes in (("--density", density, ("ties", "dare_ties")), ("--svd-rank", svd_rank, ("svd",))):
        if value is not None and method not in takes:  # PEFT would ignore it without a word
            raise RecTuneError(f"{flag} goes with --method {' or '.join(takes)}, not {method}")
    weights = weights or [1.0 / len(adapters)] * len(adapters)
    if len(weights) != len(adapters):
        raise RecTuneError(f"{len(weights)} weights for {len(adapters)} adapters")
    if not all(math.isfinite(w) for w in weights) or not any(weights):
        raise RecTuneError(f"merge weights must be finite and not all zero, got {weights}")
    _refuse_an_adapter_twice(adapters)
    out = Path(out)
    outputs = {"--out": out, "--full-model": full_model}
    _refuse_inputs_as_outputs(outputs, [("an adapter", adapter) for adapter in adapters])
    claim_output(out, ADAPTER_KIND, overwrite=overwrite)
    if full_model is not None:
        claim_output(full_model, MODEL_KIND, overwrite=overwrite)
    if method in ("ties", "dare_ties") and density is None:
        density = 0.5
    chains = {(base, tuple(merged)) for base, merged in map(adapter_chain, adapters)}
    if len(chains) != 1:
        names = ", ".join(sorted(" + ".join([b, *m]) for b, m in chains))
        raise DataError(adapters[0], f"the adapters have different base models: {names}")
    base, merged = chains.pop()
    _refuse_inputs_as_outputs(outputs, [("their base model", base), *(("an adapter under them", m) for m in merged)])
    for adapter in adapters:
        check_weights(adapter)
        check_mergeable(adapter)
    _check_ranks(method, svd_rank, adapters)
    check_model_available(base)
    check_adapters_fit(base, adapters)  # an adapter's pattern that never ends is stopped here
    _check_targeted_alike(adapters)
    import torch  # here, not at the top: the checks above answer before torch and PEFT load
    from peft import PeftModel, get_peft_model_state_dict

    model = load_merged(base, list(merged), torch.float32)
    names = [f"input_{i}" for i in range(len(adapters))]
    with peft_loading(adapters[0], base):
        peft_model = PeftModel.from_pretrained(model, adapters[0], adapter_name=names[0])
    for name, adapter in zip(names[1:], adapters[1:], strict=True):
        with peft_loading(adapter, base):
            peft_model.load_adapter(adapter, adapter_name=name)
    # PEFT makes the merged adapter's config from the first input's, its alpha set to its rank (scaling 1), where
    # rsLoRA's alpha / sqrt(rank) scaled the whole merge by sqrt(rank) (the inputs keep their own scaling)
    peft_model.peft_config[names[0]].use_rslora = False
    torch.manual_seed(seed)  # DARE drops deltas at random: the same seed gives the same merge
    peft_model.add_weighted_adapter(
        names, weights, adapter_name="merged", combination_type=METHODS[method], density=density, svd_rank=svd_rank
    )
    merged_weights = get_peft_model_state_dict(peft_model, adapter_name="merged")
    if not all(torch.isfinite(tensor).all() for tensor in merged_weights.values()):
        # DARE rescales the deltas it keeps by 1 / density: a density of 1e-300 overflowed with weights of 1/3
        cause = f" or --density {density} (DARE scales what it keeps by 1/density)" if method == "dare_ties" else ""
        raise RecTuneError(
            f"the merged adapter's weights are not finite (NaN or inf): the weights {weights}{cause} overflow"
        )
    config = peft_model.peft_config["merged"]
    if isinstance(config.target_modules, set):  # (a regex string stays as it is)
        # saved in hash order, which changes between processes: sorted, the same merge writes the same bytes
        config.target_modules = sorted(config.target_modules)
    peft_model.set_adapter("merged")  # before the inputs go, so PEFT has no active adapter to warn about
    for name in names:
        peft_model.delete_adapter(name)
    # the tokenizer saved with the first adapter (training saves one), else the base model's
    tokenizer_source = adapters[0] if (Path(adapters[0]) / "tokenizer_config.json").is_file() else base
    tokenizer = load_tokenizer(tokenizer_source)
    check_vocabulary(tokenizer, peft_model.get_input_embeddings().num_embeddings, tokenizer_source)

    with output_set(out, ADAPTER_KIND, overwrite=overwrite) as staging:
        # no embedding layers are trained or resized here; "auto" would look the base model up on the hub
        peft_model.save_pretrained(staging, selected_adapters=["merged"], save_embedding_layers=False)
        tokenizer.save_pretrained(staging)
        nested = staging / "merged"  # PEFT saves a non-default adapter in a subfolder named after it
        if (nested / "adapter_config.json").is_file():
            for item in nested.iterdir():
                item.rename(staging / item.name)
            nested.rmdir()
        if merged:  # adapters trained on a merged SFT base (SFT then RFT): so is the merge
            record_chain(staging, base, merged)
        else:
            make_portable(staging, base)
    if full_model is not None:
        merged = peft_model.merge_and_unload()
        with output_set(full_model, MODEL_KIND, overwrite=overwrite) as staging:
            merged.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    return out


def _refuse_an_adapter_twice(adapters: list[str]) -> None:
    """One line where one folder is given twice (its path and a link to it, or a shell glob and the name again):
    the merge counted it twice, weighted as two adapters (``--weights`` sets how much each one counts)."""
    given: dict[str, str] = {}
    for adapter in adapters:
        real = os.path.realpath(adapter)
        if real in given:
            raise RecTuneError(
                f"--adapters: {adapter} is {given[real]} again; name each adapter once (--weights sets how much each "
                "counts)"
            )
        given[real] = adapter


def check_mergeable(adapter: str | os.PathLike) -> None:
    """One line for an adapter a weighted merge of LoRA deltas would change without a word: PEFT merges what
    it can of it and drops the rest (a DoRA adapter's magnitudes, trained copies of whole modules, trained
    biases), and a non-finite weight turns the merge into NaN."""
    import torch
    from safetensors.torch import load_file

    path = Path(adapter) / "adapter_config.json"
    config = read_json(path)
    kind = config.get("peft_type", "LORA")
    if kind != "LORA":
        raise DataError(path, f"a {kind} adapter: merging takes LoRA adapters")
    if config.get("use_dora"):
        raise DataError(path, "a DoRA adapter: a weighted merge would drop its magnitude vectors")
    if config.get("alora_invocation_tokens"):  # PEFT would merge it as a plain LoRA adapter, acting everywhere
        raise DataError(path, "an aLoRA adapter: it acts only after its invocation tokens, which a merge drops")
    if saved := config.get("modules_to_save"):
        raise DataError(
            path, f"trains whole copies of {', '.join(map(str, saved if isinstance(saved, list) else [saved]))} "
            "(modules_to_save), "
            "which a weighted merge of LoRA deltas leaves out"
        )  # fmt: skip
    if config.get("target_parameters"):
        raise DataError(path, "targets parameters directly (target_parameters), which PEFT cannot merge")
    weights = Path(adapter) / "adapter_model.safetensors"
    for name, tensor in sorted(load_file(weights).items()):
        if not LORA_MATRIX.search(name):  # PEFT merges the LoRA matrices alone
            why = " (a trained bias: bias or lora_bias in its adapter_config.json)" if name.endswith(".bias") else ""
            raise DataError(weights, f"holds {name}, which a weighted merge of LoRA deltas leaves out{why}")
        if not torch.isfinite(tensor).all():
            raise DataError(weights, f"{name} holds values that are not finite (NaN or inf): the merge would too")


def _adapter_ranks(adapters: list[str]) -> list[int] | None:
    """Each adapter's largest rank (``r`` or its ``rank_pattern``'s), as PEFT sizes a merge by; None where one is
    no rank PEFT takes (loading the adapter says so)."""
    from peft import LoraConfig

    ranks = []
    for adapter in adapters:
        config = read_json(Path(adapter) / "adapter_config.json")
        pattern = config.get("rank_pattern")
        found = [config.get("r", LoraConfig.r), *(pattern.values() if isinstance(pattern, dict) else ())]
        if not all(isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 for rank in found):
            return None
        ranks.append(max(found))
    return ranks


def _check_ranks(method: str, svd_rank: int | None, adapters: list[str]) -> None:
    """One line, before any weight loads, where the adapters' ranks rule the merge out: TIES and DARE-TIES take
    adapters of one rank (PEFT's ValueError was a traceback once the model had loaded); an SVD rank past the rank
    the weighted sum of the deltas can have (the ranks added) adds only zero singular values, and PEFT makes LoRA
    matrices of that rank for every module (100,000 on a 135M model was killed for memory at 24 GiB)."""
    ranks = _adapter_ranks(adapters)
    if ranks is None:
        return
    if method in ("ties", "dare_ties"):
        _check_one_rank(method, ranks, adapters)
    if svd_rank is not None and svd_rank > sum(ranks):
        raise RecTuneError(
            f"--svd-rank {svd_rank}: the weighted sum of these adapters' deltas has rank at most {sum(ranks)} (their "
            f"ranks, {' + '.join(map(str, ranks))}); a larger rank adds only zeros"
        )


def _check_targeted_alike(adapters: list[str]) -> None:
    """PEFT merges adapters that name their target modules alike, all by a pattern (a string) or all by a list
    (a mix was its ValueError, a traceback once the model and adapters had loaded), and gives the merged adapter
    the first input's ``layers_to_transform``, ``layers_pattern`` and ``exclude_modules`` over all the inputs'
    target modules: where the inputs' differ, what the others train outside the first's layers was dropped
    without a word (the first adapter's layers 0 of 2 kept, the other's layer 1 lost), or PEFT fails on a
    module none of them trains."""
    configs = {adapter: read_json(Path(adapter) / "adapter_config.json") for adapter in adapters}
    kinds = {}
    for adapter, config in configs.items():
        targets = config.get("target_modules")
        kinds[adapter] = "a pattern" if isinstance(targets, str) else "a list" if isinstance(targets, list) else None
    if {"a pattern", "a list"} <= set(kinds.values()):
        named = "; ".join(f"{adapter}: {kind}" for adapter, kind in kinds.items() if kind)
        raise RecTuneError(f"--adapters: PEFT merges adapters whose target_modules are all a pattern or all a list, "
                           f"not both ({named})")  # fmt: skip
    for key in ("layers_to_transform", "layers_pattern", "exclude_modules"):
        values = [config.get(key) or None for config in configs.values()]
        if any(value != values[0] for value in values):
            raise RecTuneError(
                f"--adapters: their {key} differ ({', '.join(map(json.dumps, values))}); PEFT's merge takes the "
                "first adapter's, dropping what the others train outside it or failing on what none trains: merge "
                "adapters restricted alike"
            )


def _check_one_rank(method: str, ranks: list[int], adapters: list[str]) -> None:
    """TIES and DARE-TIES stack the adapters' matrices: PEFT takes adapters of one rank (``r`` or the largest
    ``rank_pattern`` entry), and a module the adapters give different ranks (a ``rank_pattern``'s) failed in
    ``torch.stack``."""
    from safetensors import safe_open

    also = "(--method linear or svd merges adapters of any ranks)"
    if len(set(ranks)) > 1:
        raise RecTuneError(f"--method {method} merges adapters of one rank; these have ranks "
                           f"{', '.join(map(str, ranks))} {also}")  # fmt: skip
    by_module: dict[str, list[int]] = {}
    for adapter in adapters:
        with safe_open(str(Path(adapter) / "adapter_model.safetensors"), "pt") as weights:
            for key in weights.keys():  # noqa: SIM118 (safe_open is no mapping)
                shape = weights.get_slice(key).get_shape()
                if ".lora_A." in key and len(shape) == 2:  # another shape: check_adapters_fit names it
                    module = key.split(".lora_A.")[0].removeprefix("base_model.model.")
                    by_module.setdefault(module, []).append(shape[0])
    for module, found in by_module.items():
        if len(set(found)) > 1:
            raise RecTuneError(f"--method {method} merges adapters of one rank; {module} has ranks "
                               f"{', '.join(map(str, found))} in them {also}")  # fmt: skip


def _refuse_inputs_as_outputs(outputs: dict[str, str | os.PathLike | None], inputs: list[tuple[str, str]]) -> None:
    """One line where an output folder is one of the merge's inputs or holds one, or both outputs are one folder:
    an earlier merge given as an adapter and as ``--out`` was replaced by the merge it went into, without a word."""
    given = {flag: os.path.realpath(path) for flag, path in outputs.items() if path is not None}  # a link loop too
    if len(set(given.values())) < len(given):
        raise RecTuneError("--out and --full-model name the same folder; give two folders")
    refuse_outputs_over_inputs(outputs.items(), inputs)
