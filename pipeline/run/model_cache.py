"""What a run downloads from the Hugging Face Hub, and downloading it ahead into the cache.

Every fresh cluster would otherwise pull the models on every GPU pod at start-up (about
15 GB per 7B model), every night.  The manifests mount one volume as the Hugging Face
cache on every pod (`HF_HOME`), and `bgmcts prefetch-models` (jobs/model-cache.yaml runs
it once, on a CPU pod) fills it with exactly what the configs name: the engines' model
ids and a Hub dataset source.  The replicas then load from the volume, and vLLM and
`datasets` download only what is missing.

What counts as a Hub id: the `model` of an engine that downloads its model in the
replica (`downloads_model`: the in-process vLLM engines) when it is not `embedded` and not
a local path, and an `hf` source's `name` when it is not a
local path.  OpenAI-compatible endpoints serve their own models; llama.cpp and the CPU
PRM read local files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from actors.config import ServiceConfig
from common.folders import folder_problem
from pipeline.config import RunConfig
from pipeline.errors import InputError
from pipeline.problems.sources import HFSource

# owner/name, as the Hub spells a repository id (no scheme, no leading dot or slash)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True, order=True)
class HubRepo:
    """One repository a run reads from the Hub."""

    repo_id: str
    repo_type: str  # "model" or "dataset"
    revision: str | None = None


def is_hub_id(name: str) -> bool:
    return bool(HUB_ID.match(name)) and not Path(name).exists()


def hub_repos(configs: Iterable[RunConfig]) -> list[HubRepo]:
    """The Hub repositories the configs' engines and sources download, each once."""
    found: set[HubRepo] = set()
    for config in configs:
        services: list[ServiceConfig] = [config.policy, config.scorer]
        for service in services:
            engine = service.engine
            model = getattr(engine, "model", "")
            if engine.downloads_model and is_hub_id(model):
                found.add(HubRepo(model, "model"))
        source = config.source
        if isinstance(source, HFSource) and is_hub_id(source.name):
            found.add(HubRepo(source.name, "dataset", source.revision))
    return sorted(found)


Download = Callable[[HubRepo], str]


def prefetch(repos: Iterable[HubRepo], download: Download | None = None) -> list[str]:
    """Download each repository into the Hugging Face cache (`HF_HOME`); return the local
    folders.  A repository already there is checked against the Hub and not fetched again.
    A cache that cannot be written is refused first (`writable_cache`)."""
    if download is None:
        writable_cache()
    return [(download or _snapshot)(repo) for repo in repos]


def _cache_variable() -> str:
    """The environment variable that put the Hub cache where it is."""
    return "HF_HUB_CACHE" if os.environ.get("HF_HUB_CACHE") else "HF_HOME"


def writable_cache() -> Path:
    """The Hugging Face Hub cache (under `HF_HOME`), made if it is not there; a path that
    cannot be a folder this process writes in is an InputError naming it and the variable
    (huggingface_hub raised a bare OSError, with exit 1, from deep in a download)."""
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    where = f"{_cache_variable()} (the Hugging Face cache)"
    problem = folder_problem(cache)
    if problem is not None:
        raise InputError(f"{where}: {problem}")
    return cache


def _snapshot(repo: HubRepo) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return str(
            snapshot_download(repo.repo_id, repo_type=repo.repo_type, revision=repo.revision)
        )
    except GatedRepoError:
        raise InputError(
            f"{repo.repo_type} {repo.repo_id}: gated on the Hub; accept its terms and set "
            "HF_TOKEN to a token that may read it"
        ) from None
    except RevisionNotFoundError:
        raise InputError(f"{repo.repo_type} {repo.repo_id}: no revision {repo.revision}") from None
    except RepositoryNotFoundError:
        raise InputError(
            f"{repo.repo_type} {repo.repo_id}: not on the Hub (or private, and HF_TOKEN "
            "cannot read it)"
        ) from None
    except OSError as exc:
        if exc.filename is None:  # the network (requests' errors are OSErrors): exit 1
            raise
        # the cache, full or changed under the download: the output location, exit 2
        raise InputError(
            f"{repo.repo_type} {repo.repo_id}: {_cache_variable()}: {exc.filename} cannot be "
            f"written ({exc.strerror or exc})"
        ) from None
