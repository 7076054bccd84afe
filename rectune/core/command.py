"""The ``rectune`` command: one front door to the scripts of a RecTune checkout.

    rectune prep SCRIPT [ARGS]          (SCRIPT: a data_prep/ script, e.g. demo-world or demo_world)
    rectune sft|grpo RECIPE.yaml [--flag value ...]
    rectune merge|sft-base|learn-check|eval|score|compare [ARGS]

Each subcommand runs the matching script (``data_prep/``, ``train/``, ``evaluate/``) with the rest
of the command line, exactly as ``python SCRIPT ARGS`` would; ``accelerate launch`` and ``torchrun``
still take the script paths.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from rectune.core.closed_pipes import tolerate_gone_readers

SCRIPTS = {
    "sft": "train/sft.py",
    "grpo": "train/grpo.py",
    "merge": "train/merge.py",
    "sft-base": "train/sft_base.py",
    "learn-check": "train/learn_check.py",
    "eval": "evaluate/run.py",
    "score": "evaluate/score.py",
    "compare": "evaluate/compare.py",
}
ROOT = Path(__file__).resolve().parents[2]
PREP = {path.stem.replace("_", "-"): f"data_prep/{path.name}" for path in sorted((ROOT / "data_prep").glob("*.py"))}


def usage() -> str:
    lines = [__doc__.strip(), "", "subcommands:"]
    lines += [f"  {name:12s} {script}" for name, script in SCRIPTS.items()]
    lines += [f"  prep {name:7s} {script}" for name, script in PREP.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    tolerate_gone_readers()  # `rectune --help | head -1`: its usage printed to a pipe already closed
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return
    command, rest = args[0], args[1:]
    if command == "prep":
        name = rest[0].replace("_", "-") if rest else None  # the script's own name (demo_world) works too
        if name not in PREP:
            _fail(f"rectune prep needs one of: {', '.join(PREP)}")
        script, rest = PREP[name], rest[1:]
    elif command in SCRIPTS:
        script = SCRIPTS[command]
    else:
        _fail(f"unknown subcommand {command!r}; choose from {', '.join([*SCRIPTS, 'prep'])}")
    path = ROOT / script
    if not path.is_file():
        _fail(f"{path} not found: the rectune command runs a checkout's scripts (pip install -e .)")
    sys.argv = [str(path), *rest]
    sys.path.insert(0, str(ROOT))
    runpy.run_path(str(path), run_name="__main__")


def _fail(message: str) -> None:
    """A wrong subcommand is a bad command line: exit status 2, as every script's own errors."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
