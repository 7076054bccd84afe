"""data_prep speed on a synthetic RecBench+-sized movie release (~35k queries, ~60k ratings).

Target: under 60 s on the 2-core CPU machine.

    python -m perf.bench_data_prep
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf import ROOT
from perf.synthetic import write_release


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "release"
        write_release(src, n_items=3_900, n_queries=35_000, n_ratings=60_000)
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "data_prep/recbench.py"),
                "--src",
                str(src),
                "--domain",
                "movie",
                "--out",
                str(Path(tmp) / "out"),
                "--history",
                "20",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        elapsed = time.perf_counter() - start
    print("synthetic release: 3,900 items, 35,000 queries, 60,000 ratings")
    print(f"data_prep/recbench.py end to end: {elapsed:.1f} s  (target < 60 s: {'met' if elapsed < 60 else 'MISSED'})")


if __name__ == "__main__":
    main()
