"""The MovieLens builds at the releases' sizes, on synthetic releases rated in bursts as real MovieLens
logs are (``perf/movielens_world.py``): time, peak resident memory and bytes written per build.

Targets: on an ml-100k-sized release PerRecBench within 20 CPU-s, 400 MB peak, 120 MB
written; on an ML-1M-sized one each of PerRecBench, LLMRec and the builder within 3 min and 2 GB; on an
ML-25M-sized one each within 30 min and 8 GB, with --max-groups / --max-users samples (FLAGS); and the
same two samples from an Amazon-2023-shaped category of 4 million reviews (``perf/amazon_world.py``).
Figures are measured on synthetic data of the releases' sizes and layouts, not on the releases.

    python -m perf.bench_movielens                 # ml-100k size
    python -m perf.bench_movielens --sizes ml-100k ml-1m ml-25m amazon-2023
    python -m perf.bench_movielens --sizes ml-25m --release /tmp/ml25m   # reuse (or keep) the generated release
"""

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf import ROOT
from perf.amazon_world import write_amazon_2023
from perf.movielens_world import synthetic, write, write_bursty_csv

SIZES = {  # layout, users, films, ratings
    "ml-100k": ("ml-100k", 943, 1682, 100_000),
    "ml-1m": ("ml-1m", 6040, 3706, 1_000_209),
    "ml-25m": ("ml-latest", 162_541, 59_047, 25_000_095),  # written by the numpy generator
    "amazon-2023": ("amazon-2023", 1_500_000, 400_000, 4_000_000),  # users, items, reviews (perf/amazon_world.py)
}
FLAGS = {  # samples at ML-25M: the full PerRecBench output would be tens of GB (see docs/movielens-amazon.md)
    "ml-25m": {"perrecbench.py": ("--max-groups", "20000"), "llmrec.py": ("--max-users", "20000"),
               "build_benchmark.py": ("--max-users", "5000")},
    "amazon-2023": {"perrecbench.py": ("--max-groups", "20000"), "llmrec.py": ("--max-users", "20000")},
}  # fmt: skip
TARGETS = {  # (size, script): (CPU or wall seconds, which, peak MB, MB written)
    ("ml-100k", "perrecbench.py"): (20, "cpu", 400, 120),
    ("ml-1m", "perrecbench.py"): (180, "wall", 2000, None),
    ("ml-1m", "llmrec.py"): (180, "wall", 2000, None),
    ("ml-1m", "build_benchmark.py"): (180, "wall", 2000, None),
    ("ml-25m", "perrecbench.py"): (1800, "wall", 8000, None),
    ("ml-25m", "llmrec.py"): (1800, "wall", 8000, None),
    ("ml-25m", "build_benchmark.py"): (1800, "wall", 8000, None),
    ("amazon-2023", "perrecbench.py"): (1800, "wall", 8000, None),
    ("amazon-2023", "llmrec.py"): (1800, "wall", 8000, None),
}
SUMMARY = re.compile(r"\(([\d.]+) CPU-s\), peak (\d+) MB resident, ([\d.]+) MB written")


def measure(script: str, *args: str) -> tuple[float, float, float, float]:
    """Wall seconds, CPU seconds, peak resident MB and MB written of one data_prep run (from its summary line)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "data_prep" / script), *args], check=True,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - start
    cpu, peak, written = SUMMARY.search(done.stdout).groups()
    print(f"  {script}: {done.stdout.splitlines()[0]}")  # what it found: ratings, groups or users, samples
    return wall, float(cpu), float(peak), float(written)


def ratio(value: float, target: float | None) -> str:
    return f" ({value / target:.2f} of {target:g})" if target else ""


def release(size: str, folder: Path) -> Path:
    """The synthetic release of ``size`` in ``folder`` (kept if it is there: ML-25M takes a minute to write)."""
    layout, users, films, ratings = SIZES[size]
    if folder.is_dir():
        return folder
    if size == "ml-25m":
        return write_bursty_csv(folder, users, films, ratings, seed=0)
    if size == "amazon-2023":
        return write_amazon_2023(folder, users, films, ratings, seed=0)
    return write(folder, layout, synthetic(users, films, ratings, seed=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["ml-100k"])
    parser.add_argument("--release", default=None, help="folder for the generated release (one size only)")
    args = parser.parse_args()
    print("synthetic releases (bursty ratings), this machine; wall s, CPU s, peak MB, MB written")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            folder = release(size, Path(args.release) if args.release else Path(tmp) / size)
            runs = {
                "perrecbench.py": ("--reviews", str(folder), "--domain", "movies"),
                "llmrec.py": ("--reviews", str(folder), "--domain", "movies"),
                "build_benchmark.py": ("--movielens", str(folder)),
            }
            if size == "amazon-2023":  # the builder takes MovieLens or a KG, not Amazon reviews
                source = ("--reviews", str(folder / "reviews.jsonl"), "--items", str(folder / "meta.jsonl"))
                runs = {script: (*source, "--domain", "books") for script in ("perrecbench.py", "llmrec.py")}
            for script, flags in runs.items():
                sample = FLAGS.get(size, {}).get(script, ())
                out = str(Path(tmp) / f"{size}-{script}")
                wall, cpu, peak, written = measure(script, *flags, *sample, "--out", out)
                seconds, which, peak_target, written_target = TARGETS.get((size, script), (None, "", None, None))
                timed = cpu if which == "cpu" else wall
                shown = ratio(written, written_target)
                print(f"{size:8s} {script:20s} wall {wall:7.1f}  CPU {cpu:7.1f}{ratio(timed, seconds)}  "
                      f"peak {peak:6.0f}{ratio(peak, peak_target)}  written {written:7.1f}{shown} "
                      f"{' '.join(sample)}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
