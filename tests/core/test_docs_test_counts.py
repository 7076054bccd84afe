"""The test counts the docs give (docs/measured-figures.md, the one place they are written) are the suite's."""

import re
import subprocess
import sys

import pytest
from conftest import ROOT


def collected(tier: str) -> int:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", tier],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    return int(re.search(r"(\d+)(?:/\d+)? tests? collected", result.stdout)[1])


@pytest.mark.integration  # three collections in subprocesses
def test_the_docs_tier_table_counts_the_tests_there_are():
    page = (ROOT / "docs" / "measured-figures.md").read_text()
    written = {tier: int(count) for tier, count in re.findall(r"^\| `(\w+)` \|.*\| (\d+) \|$", page, re.MULTILINE)}
    assert set(written) == {"unit", "integration", "slow"}
    assert written == {tier: collected(tier) for tier in written}, "update the tier table in docs/measured-figures.md"
