import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELEASE = ROOT / "tests" / "fixtures" / "recbench"

os.environ.setdefault("WANDB_MODE", "offline")


def run_script(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one of the project's entry scripts the way a user would."""
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True, cwd=ROOT
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{script} failed:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def movie_data(tmp_path_factory) -> Path:
    """The movie fixture release converted with every query in the test split."""
    out = tmp_path_factory.mktemp("movie")
    run_script("data_prep/recbench.py", "--src", RELEASE, "--domain", "movie", "--out", out, "--test-size", "1.0")
    return out
