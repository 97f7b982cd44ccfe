"""Fixtures for pipeline tests: a local Hub server (see tests/hub_server.py).

Endpoint tricks (huggingface_hub 2.4.0, datasets 5.2.0): both libraries read ``HF_ENDPOINT``
(and ``HF_HUB_OFFLINE``, ``HF_HUB_DISABLE_XET``, cache paths) into module constants *at import
time*, and another test module may have imported them already. So:

* at conftest import time we set safe process-wide defaults (a dead loopback endpoint, XET off,
  online, caches in a temp dir), so nothing here can ever reach huggingface.co;
* the ``hub_server`` fixture then points the already-imported constants at the live server with
  ``monkeypatch.setattr``: ``huggingface_hub.constants.ENDPOINT`` and
  ``HUGGINGFACE_CO_URL_TEMPLATE`` (``hf_hub_url`` rewrites URLs only when they start with
  ``constants.ENDPOINT``), ``datasets.config.HF_ENDPOINT`` and ``HUB_DATASETS_URL`` (every
  ``HfApi``/``HfFileSystem`` that ``datasets`` builds passes ``endpoint=config.HF_ENDPOINT``,
  read per call), plus offline/XET flags and cache dirs.
  ``pipeline.publish.publish_run.publish_run`` itself needs none of this: it takes
  ``endpoint=`` and builds ``HfApi(endpoint=...)``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub_server import HubServer

_DEFAULT_HF_HOME = Path(tempfile.mkdtemp(prefix="hf-home-"))
for _key, _value in {
    "HF_ENDPOINT": "http://127.0.0.1:9",  # discard port: never the real Hub
    "HF_HUB_DISABLE_XET": "1",
    "HF_HUB_OFFLINE": "0",
    "HF_DATASETS_OFFLINE": "0",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HOME": str(_DEFAULT_HF_HOME),
}.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture
def hub(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    """A running local Hub; the HF libraries in this process are pointed at it."""
    import datasets.config
    import huggingface_hub.constants as hf_constants

    home = tmp_path_factory.mktemp("hf-home")
    server = HubServer().start()
    endpoint = server.endpoint
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_DATASETS_CACHE": str(home / "datasets"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(hf_constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(
        hf_constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        endpoint + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", endpoint)
    monkeypatch.setattr(
        datasets.config,
        "HUB_DATASETS_URL",
        endpoint + "/datasets/{repo_id}/resolve/{revision}/{path}",
    )
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hub_server(hub: HubServer) -> str:
    """The endpoint URL of a running local Hub (see ``hub`` for the server object)."""
    return hub.endpoint
