"""Compare evaluation reports side by side: checkpoints x tasks x metrics.

    python evaluate/compare.py reports/* --out reports/comparison

Prints the table and writes reports/comparison.md, .csv and a .png bar chart. Reports are named by
their folders, baselines by their checkpoint (baseline:bm25); a ceiling (baseline:kg-oracle) is
marked "(ceiling)". With --baseline NAME every other checkpoint's values carry their difference to
NAME's with a paired bootstrap 95 % interval over queries (PerRecBench: groups), marked * when it
excludes 0; the chart shows the intervals as error bars on the bars:

    python evaluate/compare.py reports/experiment/* --baseline baseline:bm25 --out reports/vs_bm25

--by-difficulty splits every task into its difficulty tiers (PerRecBench: easy, medium, hard), each with
its own rows and intervals.
"""

from pathlib import Path

from rectune.core.cli import ArgumentParser, file_name, positive_int, run, seed
from rectune.core.escaping import markdown_cell, terminal_text
from rectune.core.kept_inputs import refuse_outputs_over_inputs
from rectune.core.owned_files import file_outputs, output_paths
from rectune.evaluation.compare import (
    OUTPUT_SUFFIXES,
    changed_answers,
    comparison_rows,
    markdown,
    metric_specs,
    other_queries_note,
    write_outputs,
)
from rectune.evaluation.report_files import load_reports


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("reports", nargs="+", help="report folders (or report.json files)")
    parser.add_argument(
        "--out", type=file_name, default="reports/comparison", help="output prefix for .md, .csv and .png"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace those files even if RecTune did not write them"
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="report name (folder name; baseline:NAME for a baseline): differences to it with 95 %% intervals",
    )
    parser.add_argument("--by-difficulty", action="store_true", help="rows and intervals per difficulty tier")
    parser.add_argument("--bootstrap-samples", type=positive_int, default=1000, help="paired bootstrap resamples")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the bootstrap resampling")
    args = parser.parse_args()
    # `reports/*` also matches this script's own .md/.csv/.png outputs: skip files that are not JSON
    reports = [r for r in args.reports if not (Path(r).is_file() and not r.endswith(".json"))]
    paths = output_paths(args.out, OUTPUT_SUFFIXES)  # none inside a report folder it reads, --overwrite or not
    folders = [Path(r).parent if Path(r).name == "report.json" else r for r in reports]
    refuse_outputs_over_inputs([("--out", path) for path in paths], [("a report", folder) for folder in folders])
    loaded = load_reports(reports, by_difficulty=args.by_difficulty)
    rows = comparison_rows(loaded, args.baseline, args.bootstrap_samples, args.seed)
    specs = metric_specs(loaded)
    changed = changed_answers(reports, args.baseline) if args.baseline else []
    changes = f"Answers that differ from {args.baseline}'s: {'; '.join(changed)}." if changed else ""
    note = " ".join(part for part in (other_queries_note(loaded), changes) if part)
    # a colleague's report names its checkpoint and tasks: a bidirectional override there reached the terminal
    print(terminal_text(markdown(rows, specs) + (f"\n\n{markdown_cell(note)}" if note else "")))
    with file_outputs(paths, overwrite=args.overwrite):
        write_outputs(rows, specs, paths, note)
    print("wrote " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    run(main)
