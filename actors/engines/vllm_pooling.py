"""A one-pass PRM on vLLM's pooling runner, in-process (GPU nodes).

`AsyncLLM` (alias `vllm.AsyncLLMEngine`) started with `runner="pooling"` runs the
model's reward head instead of its language-model head; `encode` with a
`PoolingParams(task="token_classify")` returns one row of class logits per prompt token
(vLLM 0.32: `PoolingRequestOutput.outputs.data`, a tensor [tokens, labels]).  The path
is sent as token ids built by `actors.engines.step_layout.layout` (the layout the PRM
was trained on), and each step's value is read here at its separator
(`actors.engines.pooling_values`).

Why not vLLM's STEP pooling, which reads the separators itself: it is what
`Qwen2ForProcessRewardModel` defaults to, but it has had bugs in vLLM's V1 engine and was
silently ignored for some heads, vLLM 0.32 fixes its token to 151651 (Qwen's `<extra_0>`)
for that architecture whatever the vocabulary, and with it vLLM turns off prefix caching
and chunked prefill.  The engine starts vLLM with ALL pooling (every token's row) and asks for raw
logits (`use_activation=False`; why: `pooling_values`).

Prefix caching: on by default, as for the policy, but vLLM 0.32 does not read the
cache for `token_classify` requests (its `PoolingParams` sets
`skip_reading_prefix_cache`: a cached prefix would have no rows in the output), so every
path is computed whole and `StepValues.cached_tokens` is the request's
`num_cached_tokens`, 0 in practice.

A path longer than the context is an error StepValues before any request; no request
raises (`score_steps` answers an error StepValues for whatever vLLM refuses).

`vllm` is imported lazily so the module imports (and type-checks) without it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from actors.engines.base import EngineCapacity, EngineError, StepValues
from actors.engines.pooling_values import values_at
from actors.engines.step_layout import layout, separator_id, unscorable
from actors.engines.vllm_engine import VLLMTokenizer, _import_vllm, vllm_engine_args

if TYPE_CHECKING:
    from actors.config import VLLMPoolingConfig

# Set by the engine: every token's row (see the module docstring), from the pooling runner.
POOLING_ARGS: dict[str, Any] = {"runner": "pooling", "pooler_config": {"tok_pooling_type": "ALL"}}


class VLLMPoolingEngine(VLLMTokenizer):
    """A process reward model (Hugging Face folder or hub id) on vLLM's pooling runner.

    `step_separator` is the text closing each step (one token of the model's vocabulary,
    `OnePassSettings.step_separator`).  `engine_args` passes further `AsyncEngineArgs`
    fields; one set here already (or `runner`, `pooler_config`) is refused.
    """

    def __init__(
        self,
        model: str,
        *,
        step_separator: str = "\n",
        context_length: int = 4096,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        seed: int = 0,
        enable_prefix_caching: bool = True,
        max_num_seqs: int | None = None,
        engine_args: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        extra = dict(engine_args or {})
        twice = sorted(set(extra) & {*POOLING_ARGS, "dtype"})
        if twice:
            raise EngineError(
                f"engine_args: {', '.join(twice)} is set by the pooling engine; leave it out"
            )
        kwargs = vllm_engine_args(
            model,
            context_length=context_length,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enable_prefix_caching=enable_prefix_caching,
            max_num_seqs=max_num_seqs,
            engine_args={**extra, **POOLING_ARGS, "dtype": dtype},
        )
        vllm = _import_vllm()
        from vllm.config import PoolerConfig

        kwargs["pooler_config"] = PoolerConfig(**kwargs["pooler_config"])
        try:
            self._llm: Any = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(**kwargs))
        except Exception as exc:  # vLLM raises many types while starting
            raise EngineError(f"vLLM could not start {model!r} for pooling: {exc}") from exc
        self._pooling_params: Any = vllm.PoolingParams
        self._tokenizer: Any = None
        self._separator: int | None = None
        self.step_separator = step_separator
        self.name = name or model.rstrip("/").rsplit("/", 1)[-1]
        self.context_length = context_length
        self.prompt_tokens_seen = 0
        self.cached_tokens_seen = 0

    @classmethod
    def from_config(
        cls, config: VLLMPoolingConfig, *, step_separator: str = "\n"
    ) -> VLLMPoolingEngine:
        """From the `engine:` block of a scorer config (`kind: vllm_pooling`) and the
        scorer's `one_pass.step_separator`."""
        return cls(
            config.model,
            step_separator=step_separator,
            context_length=config.max_model_len,
            dtype=config.dtype,
            tensor_parallel_size=config.tensor_parallel_size,
            gpu_memory_utilization=config.gpu_memory_utilization,
            enable_prefix_caching=config.enable_prefix_caching,
            max_num_seqs=config.max_num_seqs,
            seed=config.seed,
            engine_args=config.engine_args,
        )

    def capacity(self) -> EngineCapacity:
        """Slots and context as the started engine reports them (see `VLLMEngine`)."""
        config = getattr(self._llm, "vllm_config", None)
        scheduler = getattr(config, "scheduler_config", None)
        max_seqs = int(getattr(scheduler, "max_num_seqs", 0) or 256)
        cache = getattr(config, "cache_config", None)
        blocks, block_size = (getattr(cache, k, None) for k in ("num_gpu_blocks", "block_size"))
        kv = int(blocks) * int(block_size) if blocks and block_size else None
        return EngineCapacity(
            max_seqs=max_seqs,
            kv_tokens=kv or max_seqs * self.context_length,
            context_length=self.context_length,
        )

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        input_tokens = 0
        try:
            tokenizer = await self._get_tokenizer()
            if self._separator is None:
                self._separator = separator_id(self._encode, self.step_separator)
            path = layout(self._encode, prompt, steps, self._separator, tokenizer.bos_token_id)
            input_tokens = len(path.input_ids)
            refused = unscorable(path, self.context_length)
            if refused is not None:
                return refused
            params = self._pooling_params(task="token_classify", use_activation=False)
            final: Any = None
            async for output in self._llm.encode(
                {"prompt_token_ids": path.input_ids}, params, request_id=uuid.uuid4().hex
            ):
                final = output
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bad request must not kill the search
            message = str(exc) or type(exc).__name__
            return StepValues((), input_tokens, error=f"vLLM pooling: {message[:300]}")
        if final is None or getattr(final, "outputs", None) is None:
            return StepValues((), input_tokens, error="vLLM pooling returned no output")
        cached = getattr(final, "num_cached_tokens", None)
        cached = cached if isinstance(cached, int) and cached > 0 else 0
        self.prompt_tokens_seen += input_tokens
        self.cached_tokens_seen += cached
        rows = final.outputs.data.float().tolist()
        return values_at(rows, path.positions, input_tokens, cached, source="vLLM pooling")

    def _encode(self, text: str) -> list[int]:
        return [int(t) for t in self._tokenizer.encode(text, add_special_tokens=False)]

    async def tokenize(self, text: str) -> list[int]:
        await self._get_tokenizer()
        return self._encode(text)

    async def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)
