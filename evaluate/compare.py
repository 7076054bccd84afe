"""Compare evaluation reports side by side: checkpoints x tasks x metrics.

    python evaluate/compare.py reports/* --out reports/comparison

Prints the table and writes reports/comparison.md, .csv and a .png bar chart.
"""

import argparse
from pathlib import Path

from rectune.cli import run
from rectune.compare import comparison_rows, load_reports, markdown, metric_specs, write_outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="report folders (or report.json files)")
    parser.add_argument("--out", default="reports/comparison", help="output prefix for .md, .csv and .png")
    args = parser.parse_args()
    # `reports/*` also matches this script's own .md/.csv/.png outputs: skip files that are not JSON
    reports = [r for r in args.reports if not (Path(r).is_file() and not r.endswith(".json"))]
    loaded = load_reports(reports)
    rows, specs = comparison_rows(loaded), metric_specs(loaded)
    print(markdown(rows, specs))
    written = write_outputs(rows, specs, args.out)
    print("wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    run(main)
