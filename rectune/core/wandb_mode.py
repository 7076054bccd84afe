"""W&B without a key: runs log offline (upload later with ``wandb sync``) instead of stopping.

``wandb.init`` raises when it would log online and no API key is configured; a run that has trained
or scored for an hour must not end there. ``WANDB_MODE`` set by the user is left as it is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rectune.core.io import RecTuneError

log = logging.getLogger(__name__)


def offline_unless_logged_in() -> None:
    """Set ``WANDB_MODE=offline`` (saying so) when the user set no mode and has no W&B key."""
    if "WANDB_MODE" not in os.environ and not has_wandb_key():
        log.warning("no W&B API key found: logging offline (upload later with `wandb sync`)")
        os.environ["WANDB_MODE"] = "offline"


# W&B's cloud under both its names: `wandb login` (0.31) saves its key for api.forge.coreweave.com, W&B's default
# base URL now, and W&B still reads a key saved for api.wandb.ai, as earlier versions wrote it
WANDB_CLOUD = ("api.forge.coreweave.com", "api.wandb.ai")


def has_wandb_key() -> bool:
    """A W&B credential in the environment (an API key or an identity token file) or a ``.netrc`` entry for the
    host W&B logs to (:func:`wandb_host`). A ``.netrc`` of no UTF-8 (a Latin-1 password) or one this user cannot
    read is searched as bytes or counts as none, where reading it as text was a traceback at every run's start."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = wandb_host()
    hosts = WANDB_CLOUD if host in WANDB_CLOUD else (host,)
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        text = netrc.read_bytes() if netrc.is_file() else b""
    except OSError:
        return False
    return any(name.encode() in text for name in hosts)


def wandb_host() -> str:
    """The host W&B logs to, resolved as ``wandb.init`` resolves it: ``WANDB_BASE_URL``, else the ``base_url`` that
    ``wandb login --host`` saved in W&B's settings file, else W&B's cloud. A check for the cloud's host alone sent the
    runs of a user logged in to it with today's W&B, or to their own W&B server, offline."""
    import wandb

    settings = wandb.Settings(silent=True)  # silent: W&B says nothing of the settings files it reads
    config_dir = Path(os.environ.get("WANDB_CONFIG_DIR") or Path("~", ".config", "wandb")).expanduser()
    settings.settings_system = str(config_dir / "settings")
    settings.update_from_system_settings()
    try:
        settings.update_from_env_vars(dict(os.environ))
    except ValueError as err:  # pydantic's refusal of a WANDB_ variable (a WANDB_BASE_URL of no URL): wandb.init's
        raise RecTuneError(
            f"W&B refuses a WANDB_ setting of the environment: {' '.join(str(err).split())[:300]}"
        ) from None
    return urlsplit(settings.base_url).netloc


TAG_CHARACTERS = 64  # W&B's limit on a tag: a longer one was pydantic's ValidationError as wandb.init started


def names_problem(project: str | None = None, tags: Sequence[str] = ()) -> str | None:
    """What W&B refuses of a project name or tags, in W&B's words (its own checks: a project of at most 128
    characters, none of ``/ \\ # ? % :``; tags of 1 to 64), or None. ``wandb.init`` refused them with a traceback,
    once a training run held its folder or an evaluation had scored every query."""
    import wandb

    try:
        wandb.Settings(project=project, run_tags=tuple(tags) or None)
    except wandb.errors.UsageError as err:
        return " ".join(str(err).split())
    except ValueError as err:  # pydantic's ValidationError
        found = getattr(err, "errors", lambda: [{}])()
        return str(found[0].get("msg") or err).removeprefix("Value error, ")
    return None


def init_run(**kwargs: Any) -> Any:
    """``wandb.init(**kwargs)``, or the same run offline where W&B's server does not answer within W&B's
    ``init_timeout`` (90 s; ``WANDB_INIT_TIMEOUT``: an air-gapped cluster whose home holds a key, a server that is
    down) or refuses the key (revoked): ``wandb.init``'s ``CommError`` was a traceback, once an evaluation had
    scored every query."""
    import wandb

    try:
        return wandb.init(**kwargs)
    except wandb.errors.CommError as err:
        log.warning(
            "W&B could not start the run online (%s): logging offline (upload later with `wandb sync`)",
            " ".join(str(err).split())[:300],
        )
        return wandb.init(**kwargs, mode="offline")


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
