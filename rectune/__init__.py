"""RecTune: turn open LLMs into recommendation assistants and measure them.

The library is layered as the pipeline runs, each layer importing only those below it
(``tests/core/test_layout.py`` checks it)::

    core < data < benchmarks < models < training, evaluation

The scripts under ``data_prep/``, ``train/`` and ``evaluate/`` are thin recipes on top of it.
"""

import warnings

__version__ = "0.1.0"

# transformers 5 renames gradient checkpointing to activation checkpointing. PEFT and TRL still read and call the old
# names on every load, rollout and step, and TRL's configs set `gradient_checkpointing` by default: nothing a user
# can change, so none of these is shown
warnings.filterwarnings(
    "ignore", message=r"`(is_)?gradient_checkpointing(_kwargs|_enable|_disable)?` is deprecated", category=FutureWarning
)
