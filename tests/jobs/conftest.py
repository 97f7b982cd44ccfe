"""Shared by the `bgmcts train-prm` tests: a real run folder and a tiny base model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def prm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with prm rows of both splits (`tests.trl.build_run`: scripted search,
    then the pipeline's real records, grading and Parquet sink)."""
    from tests.trl.build_run import build

    return asyncio.run(build(tmp_path_factory.mktemp("prm-run")))


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer random Llama token classifier with SmolLM2's tokenizer from the GGUF."""
    pytest.importorskip("transformers")
    from tests.prm_checkpoint import write_tiny_prm

    # the usual small random weights: a base to train, not spread-out values to read
    return write_tiny_prm(
        tmp_path_factory.mktemp("tiny-base"),
        layers=1,
        hidden=16,
        positions=1024,
        initializer_range=0.02,
    )
