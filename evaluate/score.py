"""Score model completions against held-out canonical rows of any registered benchmark.

    python evaluate/score.py --data DIR/test.jsonl --predictions P.jsonl --out report.json

Predictions are JSONL rows {"id": ..., "completion": "raw model text"}. The catalog and KG, where
the benchmark needs them, are read from beside the data file unless --catalog/--kg say otherwise.
Each completion is scored on its answer: <think> blocks removed, then capped (--max-chars,
--max-mentions); report.json's "completions" counts how often that happened.
"""

import argparse

from rectune.cli import add_limit_arguments, limits, run
from rectune.scoring import score_files


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="canonical rows (test.jsonl)")
    parser.add_argument("--predictions", required=True, help="JSONL of {id, completion}")
    parser.add_argument("--out", required=True, help="JSON report to write")
    parser.add_argument("--catalog", default=None, help="catalog.jsonl (default: beside --data)")
    parser.add_argument("--kg", default=None, help="kg.jsonl (default: beside --data)")
    parser.add_argument("--allow-subset", action="store_true", help="score only the test ids that have predictions")
    parser.add_argument(
        "--fuzzy-cutoff", type=float, default=90.0, help="RapidFuzz ratio (0-100) for fuzzy title matches"
    )
    add_limit_arguments(parser)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    report = score_files(
        args.data,
        args.predictions,
        args.out,
        catalog=args.catalog,
        kg=args.kg,
        allow_subset=args.allow_subset,
        fuzzy_cutoff=args.fuzzy_cutoff,
        limits=limits(args),
    )
    print(report["table"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run(main)
