"""W&B without a key: runs log offline (upload later with ``wandb sync``) instead of stopping.

``wandb.init`` raises when it would log online and no API key is configured; a run that has trained
or scored for an hour must not end there. ``WANDB_MODE`` set by the user is left as it is.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def offline_unless_logged_in() -> None:
    """Set ``WANDB_MODE=offline`` (saying so) when the user set no mode and has no W&B key."""
    if "WANDB_MODE" not in os.environ and not has_wandb_key():
        log.warning("no W&B API key found: logging offline (upload later with `wandb sync`)")
        os.environ["WANDB_MODE"] = "offline"


def has_wandb_key() -> bool:
    """A W&B key in the environment or a ``.netrc`` entry for W&B's host; a ``.netrc`` of no UTF-8 (a Latin-1
    password) or one this user cannot read is searched as bytes or counts as none, where reading it as text was a
    traceback at the start of every run."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return netrc.is_file() and b"api.wandb.ai" in netrc.read_bytes()
    except OSError:
        return False


def quiet_settings():
    """``wandb.init`` settings that keep W&B's banner, summary and sync hints (about 20 lines a run) out of
    the terminal; :func:`where_logged` says in one line where the run went."""
    import wandb

    return wandb.Settings(silent=True)


def where_logged(run) -> str:
    """``W&B: run NAME at URL``, or where an offline run was saved and how to upload it."""
    if run.offline:
        return f"W&B: run {run.name} saved offline in {run.settings.sync_dir} (`wandb sync` it to upload)"
    return f"W&B: run {run.name} at {run.url}"
