"""RecTune: turn open LLMs into recommendation assistants and measure them.

The library is layered as the pipeline runs, each layer importing only those below it
(``tests/core/test_layout.py`` checks it)::

    core < data < benchmarks < models < training, evaluation

The scripts under ``data_prep/``, ``train/`` and ``evaluate/`` are thin recipes on top of it.
Modules that sat at the top level before the layers (``rectune.titles``, ``rectune.schema`` ...) still
import from their new homes (:data:`MOVED`).
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__version__ = "0.1.0"

# PEFT and TRL still read transformers' deprecated `is_gradient_checkpointing` on every load and step;
# nothing a user can change, so it is not shown
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

# old module -> where its names live now (the first that has a name provides it)
MOVED = {
    "io": ["core.io"], "cli": ["core.cli", "data.completions"], "command": ["core.command"],
    "escaping": ["core.escaping"], "locks": ["core.locks"], "outputs": ["core.outputs"],
    "owned_files": ["core.owned_files"], "provenance": ["core.provenance"],
    "titles": ["data.titles"], "mentions": ["data.mentions"], "completions": ["data.completions"],
    "catalog": ["data.catalog"], "ratings": ["data.ratings"], "movielens": ["data.movielens"],
    "rating_store": ["data.rating_store"], "sampling": ["data.sampling"], "demo_world": ["data.demo_world"],
    "schema": ["data.rows", "benchmarks"],
    "models": ["models.embedded"], "checkpoints": ["models.checkpoints"], "sharing": ["models.sharing"],
    "generation": ["models.generation"],
    "recipes": ["training.recipes"], "training_data": ["training.views"],
    "stages": ["training.stages", "models.checkpoints"], "training": ["training.setup"],
    "tracking": ["training.tracking"], "diagnostics": ["training.diagnostics"],
    "cpu_launch": ["training.cpu_launch"], "rewards": ["training.rewards", "data.completions"],
    "merging": ["training.merging"], "sft_base": ["training.sft_base"],
    "evaluation": ["evaluation.reports"], "endpoint": ["evaluation.endpoint"],
    "endpoint_request": ["evaluation.endpoint_request"], "answer_files": ["evaluation.answer_files"],
    "scoring": ["evaluation.scoring"], "compare": ["evaluation.compare"], "bootstrap": ["evaluation.bootstrap"],
}  # fmt: skip


class _Moved(types.ModuleType):
    """An old module path: each name is looked up in the modules that hold it now."""

    def __init__(self, name: str, homes: list[str]):
        super().__init__(name, f"moved to {', '.join(homes)}")
        self._homes = homes

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        for home in self._homes:
            module = importlib.import_module(home)
            if hasattr(module, attribute):
                return getattr(module, attribute)
        raise AttributeError(
            f"{self.__name__}.{attribute} is gone; RecTune's modules moved to {', '.join(self._homes)}"
        )


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("rectune.") and fullname.count(".") == 1 and fullname[8:] in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return _Moved(spec.name, [f"rectune.{home}" for home in MOVED[spec.name[8:]]])

    def exec_module(self, module):
        """Nothing to run: names resolve on access."""


sys.meta_path.append(_MovedFinder())
