"""The MovieLens builds on synthetic releases of the public ones' sizes (issue 12's targets).

* PerRecBench from an ml-100k-sized release (943 users, 1,682 films, 100k ratings): under 150 MB
  written and under 60 CPU-seconds.
* build_benchmark.py --movielens on an ml-latest-small-sized release (610 users, 9,742 films,
  ~100k half-star ratings, tags): under 60 s.
* LLMRec from the ml-100k-sized release, for reference (no target).

Prints each measurement beside its target and the ratio, from one run.

    python -m perf.bench_movielens
"""

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf.movielens_world import synthetic, write

ROOT = Path(__file__).resolve().parent.parent


def measure(script: str, *args: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one data_prep script run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "data_prep" / script), *args], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def report(name: str, value: float, target: float | None, unit: str) -> None:
    ratio = f"  ({value / target:.2f} of the {target:g} {unit} target)" if target else ""
    print(f"{name:48s} {value:8.1f} {unit}{ratio}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ml100k = write(tmp / "ml-100k", "ml-100k", synthetic(943, 1682, 100_000, seed=0))
        latest = write(tmp / "ml-latest-small", "ml-latest",
                       synthetic(610, 9742, 100_836, half_stars=True, tagged=0.15, seed=1))  # fmt: skip

        wall, cpu = measure("perrecbench.py", "--reviews", str(ml100k), "--domain", "movies", "--out", str(tmp / "p"))
        report("perrecbench ml-100k-sized: CPU time", cpu, 60, "s")
        report("perrecbench ml-100k-sized: wall time", wall, None, "s")
        report("perrecbench ml-100k-sized: written", size_mb(tmp / "p"), 150, "MB")

        wall, cpu = measure("build_benchmark.py", "--movielens", str(latest), "--out", str(tmp / "r"))
        report("build_benchmark ml-latest-small-sized: wall time", wall, 60, "s")
        report("build_benchmark ml-latest-small-sized: CPU time", cpu, None, "s")

        wall, cpu = measure("llmrec.py", "--reviews", str(ml100k), "--domain", "movies", "--out", str(tmp / "l"))
        report("llmrec ml-100k-sized: wall time", wall, None, "s")
        report("llmrec ml-100k-sized: written", size_mb(tmp / "l"), None, "MB")


if __name__ == "__main__":
    main()
