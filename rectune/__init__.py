"""RecTune: turn open LLMs into recommendation assistants and measure them.

The library holds everything recommendation-specific (benchmark rows, title matching,
metrics, rewards, prompts, model loading); the scripts under ``data_prep/``, ``train/``
and ``evaluate/`` are thin recipes on top of it.
"""

__version__ = "0.1.0"
