"""Build an engine from its config, with a clear error before any Ray work starts."""

from __future__ import annotations

import importlib.util

from actors.config import EngineConfig, LlamaCppConfig, OpenAIConfig, VLLMConfig
from actors.engines.base import Engine, EngineError
from actors.models import resolve_model_path

_PACKAGES = {
    "llamacpp": ("xllamacpp", "xllamacpp"),
    "vllm": ("vllm", "'.[gpu]'"),
    "openai": ("openai", "openai"),
}


def check_engine(config: EngineConfig) -> None:
    """Fail fast, naming the field, when the engine package or model file is missing."""
    module, install = _PACKAGES[config.kind]
    if importlib.util.find_spec(module) is None:
        raise EngineError(
            f"engine.kind={config.kind!r} needs the {module!r} package: pip install {install}"
        )
    if isinstance(config, LlamaCppConfig):
        resolve_model_path(config.model)


def build_engine(config: EngineConfig) -> Engine:
    check_engine(config)
    if isinstance(config, LlamaCppConfig):
        from actors.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(
            config.model,
            context_length=config.context_length,
            threads=config.threads,
            parallel=config.parallel,
        )
    if isinstance(config, VLLMConfig):
        from actors.engines.vllm_engine import VLLMEngine

        return VLLMEngine(config)  # type: ignore[no-any-return, unused-ignore]
    if isinstance(config, OpenAIConfig):
        from actors.engines.openai_compat import OpenAIEngine

        return OpenAIEngine.from_config(config)  # type: ignore[no-any-return, unused-ignore]
    raise EngineError(f"unknown engine kind {config!r}")
