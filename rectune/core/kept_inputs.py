"""The inputs a run reads are never among what it replaces.

``--overwrite`` means "replace my earlier output". An output that is one of the run's own inputs, holds one or
lies in one would lose it: data_prep builds ``--out`` whole and swaps it in, so ``--out`` holding the release
deleted the release it had just read; evaluation's ``--out`` naming the model's folder replaced its
``config.json`` with the report's; a merge's ``--out`` holding an adapter removed it. Each is refused,
``--overwrite`` or not.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rectune.core.io import RecTuneError

Named = tuple[str, "str | os.PathLike | None"]  # (flag, path) of an input or an output


def refuse_outputs_over_inputs(outputs: Iterable[Named], inputs: Iterable[Named]) -> None:
    """One line where an output is an input, holds one or lies in one. Inputs not here (a Hub id, a baseline's
    name, a file not yet written) are left out: nothing of theirs can be replaced."""
    found = [(flag, path, _real(path)) for flag, path in inputs if path is not None and Path(path).exists()]
    for out_flag, out in outputs:
        if out is None:
            continue
        target = _real(out)
        for in_flag, path, resolved in found:
            if resolved == target or target in resolved.parents or resolved in target.parents:
                what = "is" if resolved == target else "holds" if target in resolved.parents else "lies in"
                raise RecTuneError(
                    f"{out_flag} {out}: {what} {in_flag} {path}, which this run reads; give an output apart from "
                    "the inputs (--overwrite replaces an earlier output, never an input)"
                )


def _real(path: str | os.PathLike) -> Path:
    """The path with its links followed; a link loop stays as it is (``Path.resolve`` raised on one, a traceback
    before the output check that names the link)."""
    return Path(os.path.realpath(path))
