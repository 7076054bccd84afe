"""Every baseline on its benchmark's demo data: wall time and peak memory of `evaluate/run.py --model
baseline:NAME` (fit, hyper-parameter choice on valid.jsonl, answers, scoring), one fresh process each.

Target: each within 3 minutes on the 2-core CPU machine.

    python -m perf.bench_baselines            # needs data/experiment_movie, data/demo_perrec, data/demo_llmrec
                                              # (make data-experiment data-perrec-demo data-llmrec-demo)
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perf import ROOT
from rectune.models.baselines import registry

DATA = {
    "recbench+": ROOT / "data/experiment_movie/test.jsonl",
    "perrecbench": ROOT / "data/demo_perrec/test.jsonl",
    "llmrec": ROOT / "data/demo_llmrec/test.jsonl",
}
TARGET_S = 180.0


def measure(name: str, data: Path, out: Path) -> tuple[float, float]:
    """(seconds, peak MB) of one baseline's whole evaluation, read from GNU time's report."""
    report = out.with_suffix(".time")
    start = time.perf_counter()
    command = [sys.executable, str(ROOT / "evaluate/run.py"), "--model", f"baseline:{name}", "--data", str(data),
               "--out", str(out), "--no-wandb"]  # fmt: skip
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(report), *command], check=True, capture_output=True)
    return time.perf_counter() - start, int(report.read_text(encoding="utf-8").split()[-1]) / 1024


def main() -> None:
    missing = [str(path) for path in DATA.values() if not path.is_file()]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: make data-experiment data-perrec-demo data-llmrec-demo")
    slowest = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for benchmark, baselines in registry().items():
            for name in baselines:
                seconds, peak = measure(name, DATA[benchmark], Path(tmp) / f"{benchmark}-{name}")
                slowest = max(slowest, seconds)
                print(f"{benchmark:12s} {name:12s} {seconds:7.1f} s  {peak:7.0f} MB peak")
    print(f"slowest {slowest:.1f} s = {slowest / TARGET_S:.2f} of the {TARGET_S:.0f} s target")


if __name__ == "__main__":
    main()
