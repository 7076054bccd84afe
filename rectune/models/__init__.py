"""Models, above the benchmarks and below training and evaluation: the embedded default model
(``embedded``), what a checkpoint path is and where it came from (``checkpoints``), portable adapters
and model and dataset cards (``sharing``), batched local generation (``generation``).
"""


def __getattr__(name: str):
    """``rectune.models`` was one module before the layers: its names now live in ``rectune.models.embedded``."""
    import importlib

    module = importlib.import_module("rectune.models.embedded")
    if name.startswith("__") or not hasattr(module, name):
        raise AttributeError(f"module 'rectune.models' has no attribute {name!r}")
    return getattr(module, name)
