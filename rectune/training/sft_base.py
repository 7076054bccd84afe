"""The merged SFT base of SFT then RFT: the base model with the SFT adapter folded in (a full copy of the base
model: 517 MB for the embedded one, 12 GB for a 3B model in fp32).

The stage that trains on it builds it inside its own run folder (``_merged_sft_base``: the Hub upload skips
names starting with ``_``) and drops it once the stage is saved, so it never writes into the SFT folder, which
another run may be reading or which may not be the user's to write. Evaluation never reads it (it merges
the chain in memory); ``train/sft_base.py`` builds ``<SFT folder>/merged`` for plain PEFT loading."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch

from rectune.core.io import RecTuneError
from rectune.core.outputs import staged_folder
from rectune.models.checkpoints import adapter_chain, check_adapters_fit, load_merged
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.hub import check_model_available
from rectune.models.sharing import MERGED_FROM, merged_from, portable_name

log = logging.getLogger(__name__)


MERGED_SFT_BASE = "_merged_sft_base"  # in the SFT->RFT run's own folder while the stage trains


def merged_model(adapter_dir: str | Path, target: str | Path) -> Path:
    """The base model with the adapter merged in, saved once as ``target``; built again when the adapter changed.

    SFT then RFT merges the SFT adapter and trains a fresh RFT adapter on top: GRPO's
    reference policy is then the SFT model, and the RFT adapter loads onto a plain folder.
    A ``target`` RecTune did not build (no ``merged_from.sha256``) is refused, never replaced.
    """
    from transformers import AutoTokenizer

    adapter_dir, target = Path(adapter_dir), Path(target)
    base, merged = adapter_chain(adapter_dir)  # a clear error when this is no adapter folder (run SFT first)
    source = adapter_fingerprint(adapter_dir)
    recorded = None if target.is_symlink() else merged_from(target)
    if target.is_symlink() or (target.exists() and recorded is None):
        raise RecTuneError(
            f"{target}: is there and RecTune did not build it (it has no {MERGED_FROM}); move it away, "
            "so the merged SFT base can be written there"
        )
    if (target / "config.json").is_file() and recorded == source:
        return target
    if target.exists():
        log.info("%s was merged from an earlier version of the adapter: merging again", target)
    check_model_available(base)
    model = load_merged(base, [*merged, str(adapter_dir)], torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
    with staged_folder(target, replace=True) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / MERGED_FROM).write_text(source + "\n", encoding="utf-8")
    return target


def check_sft_adapter(adapter_dir: str | Path, model_name: str) -> None:
    """``init_adapter`` must be an adapter of the recipe's model (``model_name``, loadable here) whose weights fit
    it, checked before the run claims its folder: the merge builds on the adapter's own recorded base, so one of
    another model trained that model while the card and every record named the recipe's."""
    base, merged = adapter_chain(adapter_dir)  # a clear error when this is no adapter folder (run SFT first)
    if not _same_model(base, model_name):
        raise RecTuneError(
            f"init_adapter {adapter_dir}: is an adapter of {base}, not of this run's model_name_or_path "
            f"{model_name}; name the model it was trained on, or an SFT adapter of this model"
        )
    check_adapters_fit(base, [*merged, str(adapter_dir)])  # the same model, as this machine loads it


def _same_model(first: str, second: str) -> bool:
    """The same name as a recipe or record gives it (the embedded copy is its hub id), or the same folder."""
    if portable_name(first) == portable_name(second):
        return True
    return Path(first).is_dir() and Path(second).is_dir() and Path(first).resolve() == Path(second).resolve()


def drop_merged_model(target: str | Path) -> bool:
    """Remove ``target`` when :func:`merged_model` built it (it holds ``MERGED_FROM``); True when removed.
    A folder of that name without the record is not ours and stays."""
    target = Path(target)
    if target.is_symlink() or not (target / MERGED_FROM).is_file():
        return False
    shutil.rmtree(target)
    return True
