"""Score model completions against held-out canonical rows of any registered benchmark.

    python evaluate/score.py --data DIR/test.jsonl --predictions P.jsonl --out report.json

--predictions takes RecTune's {"id", "completion"} rows, the RecBench+ authors' {"id", "response"}
answer files (JSONL, also named .json, or one JSON list) and OpenAI Batch API output files; a separate
reasoning field is never scored. --task scores one task, and bare release ids ("3862", "0-1") resolve
within it. --metrics official scores RecBench+ as the authors' evaluator does (the paper's tables);
the default is RecTune's catalog-grounded scoring. The catalog and KG, where the benchmark needs them,
are read from beside the data file unless --catalog/--kg say otherwise.
Each completion is scored on its answer: <think> blocks removed, then capped (--max-chars,
--max-mentions); report.json's "completions" counts how often that happened.
"""

import argparse
from pathlib import Path

from rectune.core.cli import ArgumentParser, file_name, list_length, percent, run
from rectune.core.kept_inputs import refuse_outputs_over_inputs
from rectune.core.owned_files import file_outputs
from rectune.data.completions import add_limit_arguments, limits
from rectune.data.prompt_options import prompt_variant
from rectune.evaluation.scoring import score_files


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="canonical rows (test.jsonl)")
    parser.add_argument("--predictions", required=True, help="answer file: RecTune, the authors' or OpenAI batch")
    parser.add_argument("--task", default=None, help="score this task only; bare release ids resolve within it")
    parser.add_argument(
        "--metrics", choices=["default", "official"], default="default", help="official: the authors' evaluator"
    )
    parser.add_argument(
        "--k", type=list_length, default=None, help="fixed K the answers were asked for (default: as data_prep)"
    )
    parser.add_argument("--out", type=file_name, required=True, help="JSON report to write")
    parser.add_argument("--overwrite", action="store_true", help="replace --out even if RecTune did not write it")
    parser.add_argument("--catalog", default=None, help="catalog.jsonl (default: beside --data)")
    parser.add_argument("--kg", default=None, help="kg.jsonl (default: beside --data)")
    parser.add_argument("--allow-subset", action="store_true", help="score only the test ids that have predictions")
    parser.add_argument(
        "--fuzzy-cutoff", type=percent, default=90.0, help="RapidFuzz ratio (0-100) for fuzzy title matches"
    )
    parser.add_argument(
        "--score-failures-as-empty", action="store_true",
        help="score the requests a batch output records as failed as empty answers (counted in the report)",
    )  # fmt: skip
    add_limit_arguments(parser)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    variant = prompt_variant(args.data, None, args.k)  # as data_prep asked (fixed K, one boxed pick)
    given = [("--data", args.data), ("--predictions", args.predictions), ("--catalog", args.catalog), ("--kg", args.kg)]
    refuse_outputs_over_inputs([("--out", args.out)], given)  # --overwrite replaces --out, never what it scores
    with file_outputs([Path(args.out)], overwrite=args.overwrite):
        report = score_files(
            args.data,
            args.predictions,
            args.out,
            catalog=args.catalog,
            kg=args.kg,
            allow_subset=args.allow_subset,
            fuzzy_cutoff=args.fuzzy_cutoff,
            limits=limits(args),
            task=args.task,
            convention=args.metrics,
            top_k=variant["k"],
            variant=variant,
            score_failures_as_empty=args.score_failures_as_empty,
        )
    print(report["table"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run(main)
