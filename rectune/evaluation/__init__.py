"""Evaluation: report folders, resumable generation and scoring (``reports``, ``scoring``),
OpenAI-compatible endpoints (``endpoint``, ``endpoint_request``), answer files from batch providers
(``answer_files``), the W&B run (``tracking``), comparison tables and charts (``compare``) with paired
bootstrap intervals (``bootstrap``). Never imports ``rectune.training``.
"""


def __getattr__(name: str):
    """``rectune.evaluation`` was one module before the layers: its names now live in ``reports`` and
    ``tracking``."""
    import importlib

    for home in ("rectune.evaluation.reports", "rectune.evaluation.tracking"):
        module = importlib.import_module(home)
        if not name.startswith("__") and hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module 'rectune.evaluation' has no attribute {name!r}")
