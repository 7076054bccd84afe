"""The test counts the docs give (docs/measured-figures.md, the one place they are written) are the suite's:
counted from this session's own collection (``conftest.TIER_COUNTS``), so no second collection runs."""

import re

import conftest
import pytest
from conftest import ROOT


def written_counts() -> dict[str, int]:
    page = (ROOT / "docs" / "measured-figures.md").read_text()
    return {tier: int(count) for tier, count in re.findall(r"^\| `(\w+)` \|.*\| (\d+) \|$", page, re.MULTILINE)}


def test_the_docs_tier_table_counts_the_tests_there_are():
    if not conftest.TIER_COUNTS:
        pytest.skip("the counts need the whole suite collected (`pytest` or `make test`, any -m or -k)")
    written = written_counts()
    assert set(written) == {"unit", "integration", "slow"}
    assert written == conftest.TIER_COUNTS, "update the tier table in docs/measured-figures.md"
