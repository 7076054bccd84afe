"""The Hub before anything starts: a model named by its id cached or reachable, a repository to push to there.

Left to ``from_pretrained``, an id that is not cached on a machine without network retries for about a
minute and ends in a traceback; a training run would by then have claimed its output folder. The check
here looks in the cache first (no network), then asks the Hub once with a short timeout. A run that pushes
to the Hub (``push_to_hub``) has its repository made as transformers' Trainer would make it, but before the
model loads, so no login, a login that may not write there or no network is one line, not a traceback.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from rectune.core.io import RecTuneError
from rectune.models.model_folders import check_model_folder

HUB_TIMEOUT_S = 10.0  # to connect, and for each answer before a run starts
# a push's requests once the run trains: a minute without a byte from the Hub is a Hub that stopped answering
HUB_READ_TIMEOUT_S = 60.0
# the Hub's client logs each request at INFO, which the scripts show: dozens of lines before a model has loaded
logging.getLogger("httpx2").setLevel(logging.WARNING)


def check_model_available(name: str, variant: str | None = None) -> None:
    """Return when ``name`` is a local folder transformers can load (:func:`check_model_folder`, its weights'
    ``variant`` as ``model_init_kwargs`` name it), the embedded model, cached or on the Hub; else one line."""
    if name.startswith("embedded:"):
        return
    if Path(name).exists():
        check_model_folder(name, variant)
        return
    from huggingface_hub import auth_check, model_info, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except HFValidationError:
        raise RecTuneError(f"{name}: not a model folder here, nor a Hugging Face model id") from None
    if offline := hub_offline_variable():
        raise RecTuneError(
            f"{name}: not a model folder here and not in the Hugging Face cache, and {offline} is set "
            "(download it on a machine with network: `hf download NAME`, or give a local folder)"
        )
    gated = (
        f"{name}: a gated model on the Hugging Face Hub that your login may not download; ask for access on its "
        "page, then log in with `hf auth login` (or set HF_TOKEN)"
    )
    try:
        if model_info(name, timeout=HUB_TIMEOUT_S).gated:  # its page is public, its files are not
            auth_check(name)
    except GatedRepoError:
        raise RecTuneError(gated) from None  # from_pretrained's OSError, a traceback as the weights were fetched
    except RepositoryNotFoundError:
        raise RecTuneError(f"{name}: no such model on the Hugging Face Hub, nor a model folder here") from None
    except Exception as err:  # no network, DNS, a proxy: whatever the HTTP stack raises
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        raise RecTuneError(
            f"{name}: not a model folder here and not in the Hugging Face cache, and the Hub cannot be reached "
            f"({reason})"
        ) from None


def hub_offline_variable() -> str | None:
    """The variable that keeps the Hub client offline, as huggingface_hub reads them (the first one set wins),
    or None when it may go online."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if value := os.environ.get(variable):
            return variable if value.upper() in ("1", "ON", "YES", "TRUE") else None
    return None


def check_hub_repo(repo_id: str, token: str | None = None, private: bool | None = None) -> None:
    """Make the Hub repository ``repo_id`` a run pushes to (``create_repo(exist_ok=True)``, as the Trainer does
    once the model has loaded), or one line saying why it cannot be."""
    advice = "log in with `hf auth login` (or set HF_TOKEN), or train without push_to_hub"
    if offline := hub_offline_variable():
        raise RecTuneError(f"push_to_hub: {offline} is set, so nothing can be uploaded to {repo_id}")
    from huggingface_hub import create_repo
    from huggingface_hub.errors import HfHubHTTPError

    try:
        bound_hub_requests(HUB_TIMEOUT_S)  # unbounded, create_repo waits forever on a firewall that drops packets
        create_repo(repo_id, token=token, private=private, exist_ok=True)
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else None
        said = {401: "the Hub has no login of yours (no token, or one it refuses)",
                403: "your login may not create or write to it"}  # fmt: skip
        why = said.get(status) or " ".join(str(err).split())[:200]
        raise RecTuneError(f"push_to_hub: cannot make the Hub repository {repo_id}: {why}; {advice}") from None
    except ValueError as err:  # a name the Hub does not take
        raise RecTuneError(f"push_to_hub: hub_model_id {repo_id!r}: {' '.join(str(err).split())[:200]}") from None
    except Exception as err:  # no network, DNS, a proxy: whatever the HTTP stack raises
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        raise RecTuneError(f"push_to_hub: the Hub cannot be reached to make {repo_id} ({reason})") from None


def bound_hub_requests(read_s: float | None = None) -> None:
    """Give the Hub client's shared connection deadlines: ``read_s`` without a byte (``HUB_READ_TIMEOUT_S``
    unless given). It has none (``timeout=None``): a Hub that stopped answering while a run trained (a network
    that dropped) held its uploads, and the one in the stage's save that comes before ``finished.json``, forever.
    A request that sets its own timeout keeps it."""
    import httpx2
    from huggingface_hub.utils import get_session

    get_session().timeout = httpx2.Timeout(read_s or HUB_READ_TIMEOUT_S, connect=HUB_TIMEOUT_S)


def local_model_folder(name: str) -> Path | None:
    """The folder ``from_pretrained`` reads ``name`` from here: itself, or its Hugging Face cache snapshot
    (a newer revision downloaded since is another snapshot); None for a model only the Hub holds."""
    if Path(name).is_dir():
        return Path(name)
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        found = try_to_load_from_cache(name, "config.json")
    except HFValidationError:
        return None
    return Path(found).parent if isinstance(found, str) else None
