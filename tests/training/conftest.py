"""Fixtures the GRPO tests share."""

import pytest

from tests.conftest import RELEASE, run_script


@pytest.fixture(scope="module")
def grounded_data(tmp_path_factory):
    """A grounded RecBench+ movie set (10 retrieved candidates, K 5) built from the fixture release."""
    out = tmp_path_factory.mktemp("grounded")
    run_script(
        "data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "0.0",
        "--candidates", "10", "--candidate-order", "retriever", "--k", "5",
    )  # fmt: skip
    return out
