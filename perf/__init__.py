"""Speed and memory measurements: each script prints ratios measured in one run."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout the measurements run in
