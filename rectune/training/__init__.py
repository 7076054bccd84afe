"""Training: recipes read through TRL's parsers (``recipes``), the training views derived from
canonical rows (``views``), a stage's resume, ownership and end (``stages``, ``setup``), W&B tracking
(``tracking``), GRPO rewards and their diagnostics (``rewards``, ``diagnostics``), the merged SFT base
(``sft_base``), adapter merging (``merging``) and the CPU launcher and its workers (``cpu_launch``,
``cpu_worker``). Never imports ``rectune.evaluation``.
"""


def __getattr__(name: str):
    """``rectune.training`` was one module before the layers: its names now live in ``rectune.training.setup``."""
    import importlib

    module = importlib.import_module("rectune.training.setup")
    if name.startswith("__") or not hasattr(module, name):
        raise AttributeError(f"module 'rectune.training' has no attribute {name!r}")
    return getattr(module, name)
