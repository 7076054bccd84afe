"""Scoring speed: 30,000 predictions of 10 mentions each against a 9,000-item catalog.

The whole path of ``evaluate/score.py`` (``rectune.evaluation.scoring.score_files``: load and validate the
rows, catalog and KG, parse and resolve every completion, aggregate, write the report with its
per-query scores) is timed for this checkout and, in the same run, for a baseline commit checked
out into a temporary git worktree, on the same files; the ratio is printed and the two reports'
numbers are compared.

Mentions mix catalog titles in model-like spellings (a fifth of them ground-truth items; natural
article order, lower case, no year, a dropped letter for the fuzzy path) with 30 % invented
titles, which are never resolved and always take the fuzzy path.

    python -m perf.bench_scoring [--baseline REF] [--repeats 2] [--cores 1]

Targets: under 10 s; at least 1.5x faster than the commit before the one-pass scorer (the default
baseline); under 4 s with ``--cores 1`` (both trees' runs pinned to one CPU core).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from perf import ROOT
from perf.synthetic import WORDS, make_titles, variant

BEFORE_ONE_PASS = "5805435"  # the last commit whose scorer parsed every completion twice
N_ITEMS, N_PREDICTIONS, MENTIONS = 9_000, 30_000, 10
TIMER = """
import importlib, sys, time
sys.path.insert(0, sys.argv[1])
try:
    scoring = importlib.import_module("rectune.evaluation.scoring")  # the layered library
except ModuleNotFoundError:
    scoring = importlib.import_module("rectune.scoring")  # commits from before the layers
assert scoring.__file__.startswith(sys.argv[1]), scoring.__file__
start = time.perf_counter()
scoring.score_files(sys.argv[2], sys.argv[3], sys.argv[4])
print(time.perf_counter() - start)
"""


def write_inputs(folder: Path) -> tuple[Path, Path]:
    """test.jsonl, catalog.jsonl, kg.jsonl and predictions.jsonl; returns the data and predictions paths."""
    rng = random.Random(0)
    titles = make_titles(N_ITEMS, rng)
    with (folder / "catalog.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"id": str(i), "title": t}) + "\n" for i, t in enumerate(titles))
    with (folder / "kg.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(
            json.dumps({"item_id": str(i), "relation": "genre", "value": "Drama"}) + "\n" for i in range(0, N_ITEMS, 2)
        )
    rows, predictions = [], []
    for q in range(N_PREDICTIONS):
        truth = rng.sample(range(N_ITEMS), 5)
        rows.append(
            {
                "id": str(q),
                "benchmark": "recbench+",
                "domain": "movie",
                "task": "explicit",
                "query": "q",
                "ground_truth": [titles[i] for i in truth],
                "ground_truth_ids": [str(i) for i in truth],
                "conditions": [["genre", "Drama"]],
                "condition_num": 1,
            }
        )
        lines = []
        for m in range(MENTIONS):
            draw = rng.random()
            if draw < 0.3:
                lines.append(" ".join(rng.choice(WORDS) for _ in range(3)) + f" invented {q}-{m}")
            elif draw < 0.5:
                lines.append(variant(titles[rng.choice(truth)], rng))
            else:
                lines.append(variant(rng.choice(titles), rng))
        predictions.append({"id": str(q), "completion": "\n".join(f"{m + 1}. {line}" for m, line in enumerate(lines))})
    data, predicted = folder / "test.jsonl", folder / "predictions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    predicted.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return data, predicted


def time_scoring(tree: Path, data: Path, predictions: Path, report: Path, repeats: int, cores: int | None) -> float:
    """The fastest of ``repeats`` runs of ``score_files`` from the code in ``tree``, each in a fresh process
    (on the first ``cores`` CPUs this process may use, when given)."""
    allowed = sorted(os.sched_getaffinity(0))[:cores] if cores else None
    runs = []
    for _ in range(repeats):
        result = subprocess.run(
            [sys.executable, "-c", TIMER, str(tree), str(data), str(predictions), str(report)],
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
            preexec_fn=(lambda: os.sched_setaffinity(0, allowed)) if allowed else None,
        )
        runs.append(float(result.stdout.strip().splitlines()[-1]))
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BEFORE_ONE_PASS, help="git ref to compare against")
    parser.add_argument("--repeats", type=int, default=2, help="runs per tree (the fastest counts)")
    parser.add_argument("--cores", type=int, default=None, help="pin every timed run to this many CPU cores")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data, predictions = write_inputs(folder)
        baseline = folder / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        try:
            before = time_scoring(baseline, data, predictions, folder / "before.json", args.repeats, args.cores)
            after = time_scoring(ROOT, data, predictions, folder / "after.json", args.repeats, args.cores)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, check=True)
        old, new = (json.loads((folder / f).read_text(encoding="utf-8")) for f in ("before.json", "after.json"))
        same = all(
            abs(old["overall"][m] - new["overall"][m]) < 1e-9 for m in ("precision", "recall", "cmr", "ftr")
        ) and len(old["per_query"]) == len(new["per_query"])
    mentions = N_PREDICTIONS * MENTIONS
    print(f"catalog {N_ITEMS} items, {N_PREDICTIONS} predictions x {MENTIONS} mentions = {mentions} mentions")
    print(f"baseline {args.baseline}: {before:6.2f} s")
    target = 4 if args.cores == 1 else 10
    where = f" on {args.cores} core{'s' if args.cores > 1 else ''}" if args.cores else ""
    print(f"this checkout:  {after:6.2f} s{where}  ({mentions / after:,.0f} mentions/s; target < {target} s: "
          f"{'met' if after < target else 'MISSED'})")  # fmt: skip
    print(f"speed-up {before / after:.2f}x (target >= 1.5x: {'met' if before / after >= 1.5 else 'MISSED'})")
    print(f"same overall metrics and per-query count: {same}")
    print(f"overall precision {new['overall']['precision']:.3f} recall {new['overall']['recall']:.3f}")


if __name__ == "__main__":
    main()
