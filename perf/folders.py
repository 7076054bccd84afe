"""The output folder a perf script fills as it runs, marked as RecTune marks its outputs (rectune.core.outputs)."""

from __future__ import annotations

import shutil
from pathlib import Path

from rectune.core.outputs import claim_output, read_marker, write_marker


class GrowingFolder:
    """An output folder written entry by entry while its script runs (gpu-check's logs are read during the run,
    so the folder cannot be built aside and swapped in whole, as ``rectune.core.outputs.output_set`` builds one).

    This process owns it from the start. Each entry is listed in the folder's ``.rectune.json`` before anything
    is written to it, so a rerun removes exactly what earlier runs wrote, and refuses, touching nothing, a
    folder holding anything else or a file changed since :meth:`seal`; ``overwrite`` empties any folder first.
    Raises ``RecTuneError`` (one line) when refused.
    """

    def __init__(self, path: Path, kind: str, *, overwrite: bool = False) -> None:
        claim_output(path, kind, overwrite=overwrite)
        present = sorted(path.iterdir()) if path.is_dir() else []
        listed = set((read_marker(path) or {}).get("entries", [])) if present else set()
        # what is there and listed, never a listed name itself: a marker someone wrote could list "../.."
        for entry in (entry for entry in present if overwrite or entry.name in listed):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        path.mkdir(parents=True, exist_ok=True)
        self.path, self.kind, self.entries = path, kind, []
        self.vouched: dict[str, dict] = {}  # the files of the parts sealed so far, as they were then
        write_marker(path, kind, [], hashed=[])

    def entry(self, name: str) -> Path:
        """The path of entry ``name``, listed as this script's before it is written; one sealed before is no
        longer vouched for, since it is about to change."""
        unsealed = {file: record for file, record in self.vouched.items() if entry_of(file) != name}
        if name not in self.entries or unsealed != self.vouched:
            if name not in self.entries:
                self.entries.append(name)
            self.vouched = write_marker(self.path, self.kind, self.entries, hashed=[], vouched=unsealed)
        return self.path / name

    def seal(self) -> None:
        """Vouch for the files written since the last seal (their size and time: a model shape's GBs are not
        hashed), so a rerun refuses a folder where one was edited since. Called after each part: a run
        stopped by its time limit leaves the parts it finished vouched for, as they were when each ended."""
        done = {entry_of(file) for file in self.vouched}
        fresh = [name for name in self.entries if name not in done and (self.path / name).exists()]
        self.vouched = write_marker(self.path, self.kind, self.entries, hashed=fresh, digest=False,
                                    vouched=self.vouched)  # fmt: skip


def entry_of(file: str) -> str:
    """The entry a file the marker records lies in (its path relative to the folder, ``/``-separated)."""
    return file.split("/", 1)[0]
