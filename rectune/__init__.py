"""RecTune: turn open LLMs into recommendation assistants and measure them.

The library is layered as the pipeline runs, each layer importing only those below it
(``tests/core/test_layout.py`` checks it)::

    core < data < benchmarks < models < training, evaluation

The scripts under ``data_prep/``, ``train/`` and ``evaluate/`` are thin recipes on top of it.
"""

import warnings

__version__ = "0.1.0"

# PEFT and TRL still read transformers' deprecated `is_gradient_checkpointing` on every load and step;
# nothing a user can change, so it is not shown
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
