"""What to do where a file system's refusal lies in a folder the user did not name: the temporary folder, or the
Hugging Face cache that datasets, transformers and the embedded model write into."""

from __future__ import annotations

import os
import tempfile

from rectune.core.outputs import disk_full

CACHE_VARIABLES = ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HF_HOME")  # the most specific first, as the libraries read


def folder_hint(err: BaseException) -> str:
    """A parenthesis saying which such folder ``err`` names and what to set, or ""."""
    named = str((err.filename2 or err.filename) if isinstance(err, OSError) else err)  # the file it writes
    folder = tempfile.gettempdir()
    if disk_full(err) and os.path.join(folder, "") in named:  # the rating store's database, its spill files
        return f" (in the temporary folder {folder}: set TMPDIR to a folder on a disk with room)"
    for variable in CACHE_VARIABLES:
        cache = os.environ.get(variable)
        if cache and _within(named, cache):
            return f" (the Hugging Face cache, {variable}={cache}: set it to a folder you can write)"
    default = os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    if "HF_HOME" not in os.environ and _within(named, default):
        return f" (the Hugging Face cache, {default}: set HF_HOME to a folder you can write)"
    return ""


def _within(named: str, folder: str) -> bool:
    folder = os.path.abspath(folder)
    return named == folder or named.startswith(os.path.join(folder, ""))
