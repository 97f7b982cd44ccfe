"""The TRL client tests run only in ./.venv-trl (`make test-trl`); elsewhere nothing here runs.

In that venv this conftest starts the local Hub server (tests/hub_server.py) *before*
huggingface_hub or datasets is imported (both read ``HF_ENDPOINT`` at import time), so
``load_dataset(repo, config)`` reads what `pipeline.publish.publish_run.publish_run` pushed,
and nothing can reach huggingface.co.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

HAS_TRL = importlib.util.find_spec("trl") is not None
collect_ignore_glob = [] if HAS_TRL else ["test_*.py"]

SERVER: Any = None
TOKEN = "hf_trl_client_test_token"

if HAS_TRL:
    from tests.hub_server import HubServer

    SERVER = HubServer().start()
    _home = Path(tempfile.mkdtemp(prefix="hf-home-trl-"))
    os.environ.update(
        {
            "HF_ENDPOINT": SERVER.endpoint,
            "HF_TOKEN": TOKEN,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
            "HF_HOME": str(_home),
            "TOKENIZERS_PARALLELISM": "false",
            "WANDB_DISABLED": "true",
        }
    )


@pytest.fixture(scope="session")
def hub_endpoint() -> str:
    """The local Hub server this conftest started."""
    assert SERVER is not None
    return str(SERVER.endpoint)


@pytest.fixture(scope="session")
def run_dir() -> Path:
    """The run folder tests/trl/build_run.py wrote (scripts/test-trl.sh sets the variable)."""
    path = os.environ.get("BGMCTS_TRL_RUN_DIR")
    if not path:
        pytest.fail("BGMCTS_TRL_RUN_DIR is not set: run these tests with scripts/test-trl.sh")
    return Path(path)


def pytest_unconfigure(config: Any) -> None:
    if SERVER is not None:
        SERVER.stop()
