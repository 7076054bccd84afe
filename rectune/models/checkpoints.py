"""Find out what a checkpoint path is and load it for generation.

Kinds: ``embedded`` (``embedded:smollm2``), ``model`` (a hub id or a folder with
``config.json``: a base, merged or fully fine-tuned model), ``adapter`` (a PEFT folder; its
base comes from ``adapter_config.json``) and ``run`` (``outputs/<run>`` holding stage folders
``sft``, ``rft``, ``sft_rft``: the stage given, else the one trained last).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rectune.core.cli import out_of_memory
from rectune.core.io import DataError, RecTuneError, read_json_object
from rectune.models.chat_format import check_chat_template, check_vocabulary, load_tokenizer
from rectune.models.embedded import EMBEDDED, resolve_model_name
from rectune.models.fingerprints import adapter_fingerprint, model_fingerprint
from rectune.models.finite_outputs import check_finite_outputs
from rectune.models.generation import IGNORED_SETTINGS, one_answer_a_prompt
from rectune.models.hub import check_model_available
from rectune.models.model_folders import check_adapter_patterns, check_weights, error_text, on_meta_device
from rectune.models.sharing import CHAIN, MERGED_HASHES, read_chain, resolve_base

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
STAGES = ("sft", "rft", "sft_rft")


@dataclass
class Checkpoint:
    """A model to generate with: ``base_model`` (loadable here), adapters merged into it in order
    (``merged``: the SFT adapter of SFT then RFT), then ``adapter``."""

    kind: str
    path: str
    base_model: str
    adapter: str | None = None
    merged: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        return {
            "checkpoint": self.path,
            "kind": self.kind,
            "base_model": self.base_model,
            "merged_adapters": self.merged,
            "adapter": self.adapter,
        }

    def identity(self) -> str:
        """What decides its outputs: the base model and the adapters' weights (not where they lie); for an
        endpoint, its address and model name."""
        if self.kind == "openai":
            return f"endpoint {self.path}"
        if self.kind == "baseline":  # its training split's hash and hyper-parameters are in base_model
            return f"{self.path} {self.base_model}"
        adapters = [*self.merged, *([self.adapter] if self.adapter else [])]
        base = self.base_model
        if Path(base).is_dir():  # a local model folder can be rewritten in place (merge --full-model): its content
            base = f"model {model_fingerprint(base)}"
        return " + ".join([base, *(f"adapter {adapter_fingerprint(a)}" for a in adapters)])


def adapter_chain(adapter: str | Path) -> tuple[str, list[str]]:
    """The base model an adapter folder was trained on (loadable here) and the adapters merged into it
    first, oldest first (see :mod:`rectune.models.sharing`); paths in the record are relative to the folder."""
    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise DataError(adapter, "not a PEFT adapter folder (no adapter_config.json)")
    chain = read_chain(adapter)
    merged = []
    for relative, recorded in zip(chain["merged_adapters"], chain[MERGED_HASHES], strict=True):
        folder = (adapter / relative).resolve()
        if not (folder / "adapter_config.json").is_file():
            raise DataError(adapter / CHAIN, f"the SFT adapter it builds on is missing: {folder}")
        if recorded is not None and adapter_fingerprint(folder) != recorded:
            raise DataError(
                adapter / CHAIN, f"the SFT adapter it builds on, {folder}, changed since this adapter was trained on "
                "it (retrained in its folder?), so it would act on another model; put back the one it was trained on"
            )  # fmt: skip
        merged.append(str(folder))
    base = chain["base_model"]
    if not merged and not Path(base).is_absolute() and (adapter / base).exists():
        base = str((adapter / base).resolve())  # a folder recorded relative to the adapter
    base = resolve_base(base)
    if Path(base).is_absolute() and not Path(base).exists():
        raise DataError(adapter / "adapter_config.json", f"the adapter's base model {base} does not exist here")
    return base, merged


def adapter_base(adapter: str | Path) -> str:
    """The base model an adapter folder was trained on, loadable here (its chain's root)."""
    return adapter_chain(adapter)[0]


def resolve_checkpoint(name: str, stage: str | None = None) -> Checkpoint:
    if name.startswith("embedded:"):
        return Checkpoint("embedded", name, resolve_model_name(name))
    path = Path(name)
    if not path.exists():
        if name.count("/") == 1 and not name.startswith((".", "/")):
            check_model_available(name)  # a hub id: cached, or reachable, or one line now
            return Checkpoint("model", name, name)
        raise DataError(
            path, f"checkpoint not found (a model folder, a PEFT adapter folder, a run folder or {EMBEDDED})"
        )
    stages = [s for s in STAGES if (path / s / "adapter_config.json").is_file()]
    if stages:
        if stage is None:
            stage = max(stages, key=lambda s: (path / s / "adapter_config.json").stat().st_mtime)
            log.info("run folder %s: evaluating stage %r (trained last; name a stage to pick another)", path, stage)
        elif stage not in stages:
            if (path / stage).is_dir():
                resolve_checkpoint(str(path / stage))  # a stage still training says so, naming its newest checkpoint
            raise DataError(path, f"run folder has no stage {stage!r} (it has {', '.join(stages)})")
        inner = resolve_checkpoint(str(path / stage))
        return Checkpoint("run", str(path), inner.base_model, inner.adapter, inner.merged)
    if (path / "adapter_config.json").is_file():
        base, merged = adapter_chain(path)
        return Checkpoint("adapter", str(path), base, str(path), merged)
    if (path / "config.json").is_file():
        return Checkpoint("model", str(path), str(path))
    saved = [p for p in path.glob("checkpoint-*") if p.name[11:].isdigit() and (p / "adapter_config.json").is_file()]
    if saved:  # a training run still going, or stopped: its adapter is written when it finishes
        newest = max(saved, key=lambda p: int(p.name[11:])).name
        raise DataError(path, f"a training run that has not finished: evaluate a checkpoint ({newest} is the newest)")
    raise DataError(
        path,
        "not a model folder (config.json), a PEFT adapter (adapter_config.json) or a run folder "
        f"(stages {', '.join(STAGES)})",
    )


def load_merged(base_model: str, adapters: list[str], dtype: torch.dtype) -> Any:
    """``base_model`` (which the caller has checked with :func:`check_model_available`) with each adapter merged
    in, in order."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    for folder in (base_model, *adapters):
        check_weights(folder)
    check_adapters_fit(base_model, adapters)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
    for adapter in adapters:
        with peft_loading(adapter, base_model):
            model = PeftModel.from_pretrained(model, adapter)
            model = model.merge_and_unload()
    return model


def check_adapters_fit(base_model: str, adapters: list[str]) -> None:
    """Put each adapter on ``base_model`` built on the meta device, within a time limit
    (:func:`check_adapter_patterns`): a module pattern that never ends, modules the base lacks, or an adapter
    of virtual prompt tokens, which merges into no weight, stop in one line before any weights load."""
    from peft import PeftConfig
    from peft.utils.error import NoMatchingPeftModuleError
    from transformers import AutoConfig

    base_config = AutoConfig.from_pretrained(base_model) if adapters else None  # read once; a fresh model each
    for adapter in adapters:
        config_file = Path(adapter) / "adapter_config.json"
        try:
            config = PeftConfig.from_pretrained(adapter)
        except KeyError as err:  # PEFT's table of adapter types has no such name
            raise DataError(config_file, f"field 'peft_type': {err} is no adapter type PEFT knows") from None
        except Exception as err:  # whatever PEFT says of values it cannot use: an unknown task type, say
            raise DataError(config_file, f"PEFT cannot read it: {error_text(err)}") from None
        if config.is_prompt_learning:  # PEFT's merge_and_unload was an AttributeError, a traceback
            raise DataError(
                config_file, f"a {config.peft_type.value} adapter: RecTune merges adapters into the model, and virtual "
                "prompt tokens merge into no weight; give a LoRA adapter"
            )  # fmt: skip
        if hasattr(config, "init_lora_weights"):  # PiSSA's and OLoRA's start computes on weights the meta has not
            if not isinstance(config.init_lora_weights, bool | str) or _unknown_initialisation(config):
                raise DataError(config_file, "field 'init_lora_weights': must be true, false or the name of a PEFT "
                                f"initialisation, got {config.init_lora_weights!r}")  # fmt: skip
            config.init_lora_weights = True  # the module matching is checked here, not how training began
        try:
            placed = check_adapter_patterns(on_meta_device(base_config), config, adapter)
        except RecTuneError:
            raise
        except NoMatchingPeftModuleError as err:
            raise DataError(
                adapter, f"does not fit {base_model} (trained on another model?): {error_text(err)}"
            ) from None
        except Exception as err:  # settings PEFT takes apart only as it builds the layers: r -1, alpha null
            raise DataError(config_file, f"PEFT cannot apply it to {base_model}: {error_text(err)}") from None
        _check_adapter_weights(Path(adapter), placed, base_model)


def _unknown_initialisation(config: Any) -> bool:
    """Whether PEFT names ``config``'s ``init_lora_weights`` an unknown initialisation, asked of one 4 × 4 linear
    layer (milliseconds): it says so only as it builds the layers, once the base model's weights have loaded. Other
    refusals there (LoftQ without its settings, CorDA without its preprocessing) are left to loading to say."""
    import torch
    from peft import LoraConfig, get_peft_model

    if not isinstance(config.init_lora_weights, str):  # a bool (a value of another type never gets here)
        return False
    probe = torch.nn.Sequential()
    probe.add_module("layer", torch.nn.Linear(4, 4))
    try:
        with warnings.catch_warnings():  # EVA's default settings, said of the probe
            warnings.simplefilter("ignore")
            get_peft_model(probe, LoraConfig(r=2, target_modules=["layer"], init_lora_weights=config.init_lora_weights))
    except ValueError as err:
        return str(err).startswith("Unknown initialization")
    except Exception:  # the probe asks one question; anything else is loading's to say
        return False
    return False


def _check_adapter_weights(adapter: Path, placed: Any, base_model: str) -> None:
    """One line where the adapter's weights lack some its configuration makes (``placed``: the adapter put on
    the base, on the meta device): PEFT warned of missing keys among other warnings and left them as they start,
    where LoRA adds nothing, so a base model was scored under the adapter's name; or shapes them otherwise,
    which PEFT found only once the base model's weights had loaded."""
    from peft import get_peft_model_state_dict

    weights = adapter / "adapter_model.safetensors"
    if not weights.is_file():
        return  # pickle weights are refused where they are read
    present = {name: entry.get("shape") for tensors in check_weights(adapter).values() for name, entry in
               tensors.items()}  # fmt: skip
    expected = get_peft_model_state_dict(placed)
    missing = [name for name in expected if name not in present]
    if missing:
        shown = ", ".join(missing[:2]) + (", …" if len(missing) > 2 else "")
        raise DataError(
            weights, f"holds no {shown} ({len(missing)} of the {len(expected)} weights its adapter_config.json "
            "makes): PEFT would leave them as they start, where the adapter changes nothing"
        )  # fmt: skip
    for name, tensor in expected.items():
        if present[name] != list(tensor.shape):  # found here, not after the base model's weights have loaded
            raise DataError(
                weights,
                f"{name} has shape {present[name]}; its adapter_config.json on {base_model} makes it "
                f"{list(tensor.shape)} (trained on another model?)",
            )


@contextlib.contextmanager
def peft_loading(adapter: str | os.PathLike, base_model: str) -> Iterator[None]:
    """PEFT's errors as it loads an adapter onto ``base_model`` or merges it, as one line naming the adapter."""
    try:
        yield
    except RecTuneError:
        raise
    except NotImplementedError as err:  # a LoRA variant PEFT cannot merge (aLoRA)
        raise DataError(adapter, f"PEFT cannot merge it into {base_model}: {error_text(err)}") from None
    except RuntimeError as err:  # tensors shaped for another model's layers
        if out_of_memory(err):
            raise  # the device's limit, not the adapter's fault: the entry script says so
        raise DataError(adapter, f"does not fit {base_model} (trained on another model?): {error_text(err)}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # settings PEFT reads only as it builds layers
        config_file = Path(adapter) / "adapter_config.json"
        raise DataError(config_file, f"PEFT cannot load it onto {base_model}: {error_text(err)}") from None


def tokenizer_source(checkpoint: Checkpoint) -> str:
    """Where a checkpoint's tokenizer is read: its adapter folder when it saved one, else its base model."""
    if checkpoint.adapter and (Path(checkpoint.adapter) / "tokenizer_config.json").is_file():
        return checkpoint.adapter
    return checkpoint.base_model


def generation_dtype() -> torch.dtype:
    """What local generation computes in, with either backend: bf16 on GPUs that compute it, else fp32."""
    import torch

    return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32


def load_for_generation(checkpoint: Checkpoint, dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """Model (adapter merged in, eval mode) and a left-padding tokenizer; bf16 on GPUs that have it
    unless ``dtype`` says otherwise, else fp32."""
    import torch  # here, not at the top: evaluation's arguments, endpoints and baselines need no torch

    dtype = dtype or generation_dtype()
    check_model_available(checkpoint.base_model)  # a folder transformers cannot load: one line, before its tokenizer
    source = tokenizer_source(checkpoint)
    tokenizer = load_tokenizer(source)
    check_chat_template(tokenizer, source)  # before the model loads
    adapters = [*checkpoint.merged, *filter(None, [checkpoint.adapter])]
    model = load_merged(checkpoint.base_model, adapters, dtype)
    check_vocabulary(tokenizer, model.get_input_embeddings().num_embeddings, source)
    ignored = one_answer_a_prompt(model)
    if ignored:
        log.warning(IGNORED_SETTINGS, checkpoint.base_model, ", ".join(ignored))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:  # any token pads: the attention mask hides it (a tokenizer may name no end token)
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.convert_ids_to_tokens(0)
    if torch.cuda.is_available():
        model = model.to("cuda")
    # else its answers, the argmax of NaN logits, would be scored as the model's
    check_finite_outputs(model.eval(), " + ".join([checkpoint.base_model, *adapters]))
    return model, tokenizer


WANDB_RUN = "wandb_run.json"  # the stage's W&B run id and URL: a resumed stage resumes its W&B run
FINISHED = "finished.json"  # written last, once the stage's adapter and run files are saved


def finished_stage(output_dir: str | os.PathLike) -> dict | None:
    """The record of a finished stage in ``output_dir``, or None while it is unfinished."""
    path = Path(output_dir) / FINISHED
    return read_json_object(path) if path.is_file() else None


def wandb_run_record(output_dir: str | os.PathLike) -> dict:
    """The stage's W&B run (``id``, ``project``, ``url``: the strings among them), or ``{}`` when it has none."""
    path = Path(output_dir) / WANDB_RUN
    record = read_json_object(path) if path.is_file() else {}  # an adapter folder from elsewhere carries it too
    return {key: record[key] for key in ("id", "project", "url") if isinstance(record.get(key), str)}
