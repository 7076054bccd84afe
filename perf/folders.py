"""Output folders of the perf scripts: each script empties only what it wrote there before."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path


def fresh_folder(out: Path, owner: str, ours: re.Pattern) -> None:
    """Create ``out``, or empty it of what ``owner`` wrote there before (the names ``ours`` matches), and mark
    it as ``owner``'s. Exits in one line, touching nothing, where ``out`` exists without ``owner``'s mark or
    holds anything else (a folder of someone's own, or one they added to)."""
    marker = f".{owner.replace('-', '_')}"
    if out.exists() and not (out / marker).is_file():
        sys.exit(f"{owner}: {out} exists and was not written by {owner}; choose another --out")
    earlier = sorted(entry.name for entry in out.iterdir()) if out.exists() else []
    foreign = [name for name in earlier if name != marker and not ours.fullmatch(name)]
    if foreign:
        sys.exit(f"{owner}: {out} holds files {owner} did not write ({', '.join(foreign)}); choose another --out")
    for name in earlier:
        entry = out / name
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / marker).write_text(f"written by {owner}\n")
