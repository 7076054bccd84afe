"""What `make demo`'s numbers depend on, as one hash: the README records it beside the demo table.

    python demo/provenance.py      # the line `make demo` ends with: commit and demo-inputs hash

The inputs are the demo world, the scripts that build its benchmark, its recipes, the prompt and
target code, and the Makefile's demo targets. `tests/core/test_demo_provenance.py` fails when the
README's table was measured on other inputs, so a change to any of them calls for `make demo` again.
Changes elsewhere in the library (training or generation code) are not covered: they are vouched for by
the commit the README names.
"""

import hashlib
import re
from pathlib import Path

from rectune.core.provenance import git_commit

ROOT = Path(__file__).resolve().parent.parent
FILES = (
    "demo/films.txt",
    "data_prep/demo_world.py",
    "data_prep/build_benchmark.py",
    "data_prep/recbench.py",
    "recipes/smollm2_movie_cpu.yaml",
    "recipes/smollm2_movie_cpu_grpo.yaml",
    "rectune/benchmarks/recbench/prompts.py",
    "rectune/benchmarks/recbench/rewards.py",
)
# the Makefile's demo targets and variables: a block runs from its first line to the next blank line
MAKEFILE_BLOCKS = (r"^DEMO_\w+ :=[^\n]*", r"^data-demo: .*?(?=\n\n)", r"^define train_and_score.*?^endef$",
                   r"^demo: .*?(?=\n\n)")  # fmt: skip


def inputs_hash() -> str:
    """SHA-256 (first 12 hex digits) of the demo's inputs as they are in this checkout."""
    digest = hashlib.sha256()
    for name in FILES:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for pattern in MAKEFILE_BLOCKS:
        for block in re.findall(pattern, makefile, flags=re.MULTILINE | re.DOTALL):
            digest.update(block.encode() + b"\0")
    return digest.hexdigest()[:12]


def line() -> str:
    """The commit as run configs record it (``-dirty`` with uncommitted changes), and the inputs' hash."""
    return f"demo measured at commit {git_commit()}, demo inputs {inputs_hash()}"


if __name__ == "__main__":
    print(line())
