"""Build an engine from its config, with a clear error before any Ray work starts."""

from __future__ import annotations

import importlib.util

from actors.config import (
    EngineConfig,
    LlamaCppConfig,
    LoadModelConfig,
    OpenAIConfig,
    SleepConfig,
    VLLMConfig,
)
from actors.engines.base import Engine, EngineError
from actors.models import resolve_model_path

# engine kind -> (module it imports, what to pip install); None: nothing beyond the base install
_PACKAGES: dict[str, tuple[str, str] | None] = {
    "llamacpp": ("xllamacpp", "xllamacpp"),
    "vllm": ("vllm", "'.[gpu]'"),
    "openai": ("openai", "openai"),
    "sleep": None,
    "load_model": None,
}


def check_engine(config: EngineConfig) -> None:
    """Fail fast, naming the field, when the engine package or model file is missing."""
    package = _PACKAGES[config.kind]
    if package is not None and importlib.util.find_spec(package[0]) is None:
        module, install = package
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
    if isinstance(config, SleepConfig):
        from actors.engines.sleep import SleepEngine

        return SleepEngine(
            latency_s=config.latency_s,
            output_tokens=config.output_tokens,
            context_length=config.context_length,
            answer_every=config.answer_every,
            seed=config.seed,
            name=config.model,
        )
    if isinstance(config, LoadModelConfig):
        from actors.engines.batching import EngineCurve
        from actors.engines.load_model import LoadModelEngine

        curve = EngineCurve(
            decode_base_s=config.decode_base_ms / 1000,
            decode_per_seq_s=config.decode_per_seq_ms / 1000,
            decode_per_context_token_s=config.decode_per_context_token_ns / 1e9,
            prefill_tokens_per_s=config.prefill_tokens_per_s,
            max_seqs=config.max_seqs,
        )
        return LoadModelEngine(
            curve=curve,
            cache_tokens=config.cache_tokens,
            block_tokens=config.block_tokens,
            time_scale=config.time_scale,
            output_tokens=config.output_tokens,
            context_length=config.context_length,
            answer_every=config.answer_every,
            slow_marker=config.slow_marker,
            slow_factor=config.slow_factor,
            seed=config.seed,
            name=config.model,
            output_tokens_max=config.output_tokens_max,
        )
    raise EngineError(f"unknown engine kind {config!r}")
