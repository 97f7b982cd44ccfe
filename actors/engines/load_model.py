"""The engine-shaped load model: the sleep engine's answers, a continuous-batching GPU's timing.

`LoadModelEngine` answers exactly as `SleepEngine` does (same texts, stop strings,
answers, judgement log-probabilities, context overflow), but each request waits as
long as it would inside a continuous-batching engine (`actors.engines.batching`):
decode steps that slow down as the batch grows, prefill of the *uncached* prompt
tokens, an LRU prefix cache, at most `max_seqs` sequences at once.  No model runs, so
a CPU machine can measure how close the whole pipeline keeps an engine to its own
ceiling (`ceiling()`, `stats()`).

Where the default curve comes from (one H100 80GB SXM, vLLM, a 7-8B model, bf16):

* **Decode step with few sequences, 7.9 ms.** LambdaLabsML/vllm-benchmark,
  `results/prompt_10/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len2000.json`
  (vLLM, 10 ShareGPT prompts sent at once): median inter-token latency 7.88 ms.
* **Decode step with a full batch, 20.4 ms.** research.aimultiple.com/inference-engines
  (Llama 3.1 8B-Instruct, bf16, 1x H100 80GB, 1,000 ShareGPT prompts offline): vLLM
  12,553 output tokens/s (SGLang 16,215); with 256 sequences in flight that is
  256 / 12,553 s = 20.4 ms per step.
* A straight line through both points: `decode_base_ms` 7.4 and `decode_per_seq_ms`
  0.051 (step(10) = 7.9 ms, step(256) = 20.4 ms); ceiling 12,550 decode tokens/s.
* **Prefill, 24,000 tokens/s.** The same Lambda file: the 10 prompts (1,585 input tokens
  together) got their first token after 65 ms (8 of 10 TTFTs 64.7-65.7 ms): at least
  1,585 / 0.065 = 24,400 tokens/s, rounded down (the 65 ms also holds a decode step).
* **`max_seqs` 256**: vLLM's default `max_num_seqs` in the versions benchmarked (0.5-0.6).
* **Prefix cache 400,000 tokens, blocks of 16**: Mistral-7B keeps 2 (K, V) x 32 layers x
  8 KV heads x 128 dims x 2 bytes = 128 KiB per token; 0.9 of 80 GB less 14.5 GB of
  weights leaves about 57 GB, i.e. about 440,000 tokens; 16 is vLLM's block size.

Every value is a config field (`actors.config.LoadModelConfig`); `time_scale`
stretches or shrinks all durations alike, so ratios to the ceiling stay the same.
A prompt containing `slow_marker` stays `slow_factor` times as many steps in the batch
(a deliberately slow problem, for tests and for trees of varied length).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from actors.engines.base import Completion, EngineCapacity, EngineLoad, Sampling
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache, decode_steps_for
from actors.engines.sleep import SleepEngine

if TYPE_CHECKING:
    from actors.config import LoadCurveConfig, LoadModelConfig

# The config fields that make the engine's curve (in ms and ns there, seconds here).
_CURVE_FIELDS = {
    "decode_base_ms",
    "decode_per_seq_ms",
    "decode_per_context_token_ns",
    "prefill_tokens_per_s",
    "max_seqs",
}


def curve_and_rest(config: LoadCurveConfig) -> tuple[EngineCurve, dict[str, Any]]:
    """A load-model config's curve (its fields in ms and ns, the curve's in seconds) and
    every other field but `kind` and `model`, the engine constructor's keywords."""
    curve = EngineCurve(
        decode_base_s=config.decode_base_ms / 1000,
        decode_per_seq_s=config.decode_per_seq_ms / 1000,
        decode_per_context_token_s=config.decode_per_context_token_ns / 1e9,
        prefill_tokens_per_s=config.prefill_tokens_per_s,
        max_seqs=config.max_seqs,
    )
    return curve, config.model_dump(exclude={"kind", "model", *_CURVE_FIELDS})


class LoadModelEngine:
    """A model-free engine whose service time follows a continuous-batching engine."""

    def __init__(
        self,
        *,
        curve: EngineCurve,
        cache_tokens: int = 400_000,
        block_tokens: int = 16,
        time_scale: float = 1.0,
        output_tokens: int = 16,
        context_length: int = 4096,
        answer_every: int = 4,
        slow_marker: str | None = None,
        slow_factor: float = 1.0,
        seed: int = 0,
        name: str = "load-model",
        output_tokens_max: int | None = None,
    ) -> None:
        self.answers = SleepEngine(
            latency_s=0.0,
            output_tokens=output_tokens,
            output_tokens_max=output_tokens_max,
            context_length=context_length,
            answer_every=answer_every,
            seed=seed,
            name=name,
        )
        self.batcher = ContinuousBatcher(curve, PrefixCache(cache_tokens, block_tokens), time_scale)
        self.slow_marker = slow_marker
        self.slow_factor = slow_factor
        self.name = name
        self.context_length = context_length

    @classmethod
    def from_config(cls, config: LoadModelConfig) -> LoadModelEngine:
        """From the `engine:` block of a service config (`kind: load_model`): the curve's
        fields make the curve; every other field but `kind` is a keyword of the
        constructor, `model` under the name `name`."""
        curve, rest = curve_and_rest(config)
        return cls(curve=curve, name=config.model, **rest)

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        completion = self.answers.respond(prompt, sampling)
        words = prompt.split()
        if completion.output_tokens == 0:  # context overflow: rejected before prefill
            return completion
        slow = self.slow_marker is not None and self.slow_marker in prompt
        steps = decode_steps_for(completion.output_tokens, self.slow_factor if slow else 1.0)
        cached = await self.batcher.run(words, completion.text.split(), steps)
        return replace(completion, cached_tokens=cached)

    def ceiling(self) -> dict[str, float]:
        """The engine's own limits (simulated, i.e. at time_scale 1)."""
        curve = self.batcher.curve
        return {
            "decode_tokens_per_s": curve.ceiling_decode_tokens_per_s,
            "prefill_tokens_per_s": curve.prefill_tokens_per_s,
            "max_seqs": float(curve.max_seqs),
            "time_scale": self.batcher.time_scale,
        }

    def capacity(self) -> EngineCapacity:
        """Slots and KV tokens from the config; the hit rate from the counters so far."""
        stats = self.batcher.stats
        hit = stats.cached_prompt_tokens / stats.prompt_tokens if stats.prompt_tokens else None
        return EngineCapacity(
            max_seqs=self.batcher.curve.max_seqs,
            kv_tokens=self.batcher.cache.capacity_tokens,
            context_length=self.context_length,
            prefix_hit_rate=hit,
        )

    def load(self) -> EngineLoad:
        """The batch now and the prompt-token counters (simulated: all of it is known)."""
        stats = self.batcher.stats
        return EngineLoad(
            max_seqs=self.batcher.curve.max_seqs,
            running=self.batcher.running,
            waiting=self.batcher.waiting,
            prompt_tokens=stats.prompt_tokens,
            cached_prompt_tokens=stats.cached_prompt_tokens,
        )

    def stats(self) -> dict[str, Any]:
        """Counters since start: work_s / (wall seconds / time_scale) is the utilisation."""
        live = {"running": self.batcher.running, "waiting": self.batcher.waiting}
        return {**asdict(self.batcher.stats), **self.ceiling(), **live}

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        return await self.answers.render_chat(messages, continue_final=continue_final)

    async def tokenize(self, text: str) -> list[int]:
        return await self.answers.tokenize(text)

    async def close(self) -> None:
        return None


__all__ = ["LoadModelEngine"]
