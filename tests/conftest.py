"""Fixtures every test folder may use: a tiny one-pass PRM checkpoint (tests/prm_checkpoint.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-layer random Llama token classifier with SmolLM2's real tokenizer and chat
    template (its step values spread well apart), written once per test session."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from tests.prm_checkpoint import write_tiny_prm

    return write_tiny_prm(tmp_path_factory.mktemp("tiny-prm"))
