"""Where a result came from: the code's git commit, recorded in run configs and reports."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# git reads configuration from the environment (GIT_CONFIG_*, GIT_DIR, ...) and runs core.fsmonitor and
# hooks; recording the commit must run nothing else, so git gets a clean environment and those off.
_SAFE_GIT = ("git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-optional-locks")


def _git(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(PROJECT_ROOT)}
    return subprocess.run(
        [*_SAFE_GIT, *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=check, env=env, timeout=30
    )


def git_commit() -> str:
    """The checkout's short commit hash, ``-dirty`` when it has uncommitted changes; ``unknown`` outside git."""
    try:
        result = _git("rev-parse", "--short", "HEAD", check=True)
        dirty = _git("status", "--porcelain")
        return result.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return "unknown"
