"""The engine-shaped load model: placeholder answers, a continuous-batching GPU's timing.

`LoadModelEngine` implements the `Engine` contract without any model, so the whole
pipeline (Ray Data, search actors, Serve handles, GenPRM, grading, the sink) runs and
can be timed on a CPU machine.  Its answers (`respond`) are placeholders:

* `output_tokens` whitespace tokens (or a length drawn per request in
  [`output_tokens`, `output_tokens_max`]).
* With a stop string the completion ends on it (finish `stop_string`; the stop
  string counts as one generated token and is excluded from the text), except
  every `answer_every`-th request (chosen by a hash of the engine seed, the
  request seed and the prompt, so the same request always gets the same
  answer) ends with "so the final answer is $\\boxed{42}$." and finish `eos`,
  which the search counts as an answered node.  Without a stop string (a full
  generation) the completion always ends with that answer and `eos`.
* A completion that would need more than `max_tokens` is cut at `max_tokens`
  (finish `length`), never longer: the search's budget invariant holds.
* With `top_logprobs > 0` every generated token carries a top list that holds
  "Yes" and "No" (probabilities derived from the same hash), so GenPRM's
  `judgement_score` gives a score strictly inside (0, 1); the one-token
  judgement's own text is the more likely label.
* A prompt of `context_length` tokens or more comes back as `context_overflow`.
* For tests only, `cached_over_sent` makes every answer report more prompt tokens served
  from its cache than it was sent (both load engines): what an engine's server can do
  wrong, which the counts' check clamps (`actors.engines.read_counts`) and the run's
  report names.
* `render_chat` joins the messages as "role: content" lines; `tokenize`
  splits on whitespace (token ids are positions).

Each request waits as long as it would inside a continuous-batching engine
(`actors.engines.batching`):
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

Every value is a config field (`LoadModelConfig`); `time_scale`
stretches or shrinks all durations alike, so ratios to the ceiling stay the same.
A prompt containing `slow_marker` stays `slow_factor` times as many steps in the batch
(a deliberately slow problem, for tests and for trees of varied length).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, Literal

from pydantic import Field, model_validator

from actors.engines.base import (
    Completion,
    EngineCapacity,
    EngineConfigBase,
    EngineLoad,
    Sampling,
    TopLogprobs,
)
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache, decode_steps_for
from search.protocols import FinishReason

ANSWER_TEXT = "so the final answer is $\\boxed{42}$."
_FILLER = "word"


class LoadCurveConfig(EngineConfigBase):
    """The continuous-batching curve both model-free load engines run on (the policy's,
    `load_model`, and the one-pass PRM's, `load_model_prm`): one definition of each field,
    so the two cannot drift apart.  A step is a decode step of the policy's engine, the
    one forward step of a scored path on the PRM's.
    """

    # each engine narrows `kind` to its Literal and gives `model` its default; declared
    # here so that they stay the first keys of both engines (and of their docs)
    kind: str
    model: str = Field(description="the name the engine reports")
    decode_base_ms: float = Field(
        7.4,
        ge=0,
        description="step time with no sequences (a decode step; the PRM's: its forward step)",
    )
    decode_per_seq_ms: float = Field(
        0.051, ge=0, description="extra step time per sequence in the batch"
    )
    decode_per_context_token_ns: float = Field(
        0.0,
        ge=0,
        description="extra step time per context token the batch holds (attention reading "
        "the KV cache); 0: folded into decode_per_seq_ms, as the public figures are",
    )
    prefill_tokens_per_s: float = Field(24_000.0, gt=0, description="uncached prompt tokens/s")
    max_seqs: int = Field(256, ge=1, description="sequences in the batch at most; others queue")
    cache_tokens: int = Field(400_000, ge=0, description="LRU prefix cache size in tokens")
    block_tokens: int = Field(16, ge=1, description="prefix cache block size in tokens")
    time_scale: float = Field(
        1.0, gt=0, description="multiplies every duration (<1 faster, >1 slower than the GPU)"
    )
    cached_over_sent: int = Field(
        0,
        ge=0,
        description="for tests only: every answer reports this many more prompt tokens served "
        "from its cache than it was sent (cached > sent, an engine's fault that the counts' "
        "check clamps and the run report names); 0: counts that can be",
    )

    @model_validator(mode="after")
    def _a_step_takes_time(self) -> LoadCurveConfig:
        # the curve's ceiling is sequences per step time: a step of no time has none (its
        # batcher divided by zero in its loop, and every request waited for ever)
        if self.decode_base_ms == 0 and self.decode_per_seq_ms == 0:
            raise ValueError(
                "decode_base_ms and decode_per_seq_ms are both 0: a decode step would take "
                "no time; set one of them above 0"
            )
        return self

    def batcher(self) -> ContinuousBatcher:
        """A simulated engine on this curve (its fields in ms and ns, the curve's in
        seconds), with its own prefix cache."""
        curve = EngineCurve(
            decode_base_s=self.decode_base_ms / 1000,
            decode_per_seq_s=self.decode_per_seq_ms / 1000,
            decode_per_context_token_s=self.decode_per_context_token_ns / 1e9,
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            max_seqs=self.max_seqs,
        )
        cache = PrefixCache(self.cache_tokens, self.block_tokens)
        return ContinuousBatcher(curve, cache, self.time_scale)


class LoadModelConfig(LoadCurveConfig):
    """No model: a continuous-batching engine's timing (actors/engines/load_model.py).

    Defaults: vLLM serving a 7-8B model on one H100 80GB; the module docstring cites
    the published benchmarks each value comes from.
    """

    kind: Literal["load_model"] = Field(
        "load_model", description="no model: a continuous-batching engine's timing"
    )
    model: str = Field("load-model", description="the name the engine reports")
    output_tokens: int = Field(16, ge=1, description="tokens per completion (max_tokens caps)")
    output_tokens_max: int | None = Field(
        None,
        ge=1,
        description="None: every completion has output_tokens; else each one's length is "
        "drawn in [output_tokens, output_tokens_max] (steps and trees of varied length)",
    )
    context_length: int = Field(
        4096,
        ge=256,
        description="tokens of one sequence (prompt and completion); a longer prompt comes "
        "back as a context overflow",
    )
    answer_every: int = Field(
        4, ge=0, description="every n-th stopped step answers $\\boxed{42}$ instead; 0: never"
    )
    answers: list[str] = Field(
        default_factory=lambda: ["42"],
        min_length=1,
        description="the answers an answering completion gives, one drawn per completion "
        "(so a problem whose reference is one of several answers gets correct and incorrect "
        "nodes: preference pairs)",
    )
    slow_marker: str | None = Field(
        None, description="a prompt containing this text is slow (a deliberately slow problem)"
    )
    slow_factor: float = Field(1.0, ge=1, description="how many times longer a slow request runs")
    seed: int = Field(0, description="seeds which completions answer (with the request's seed)")

    @model_validator(mode="after")
    def _length_range(self) -> LoadModelConfig:
        """Refused here, not when the replica builds the engine (a dry run would pass it)."""
        if self.output_tokens_max is not None and self.output_tokens_max < self.output_tokens:
            raise ValueError(
                f"output_tokens_max ({self.output_tokens_max}) must be >= output_tokens "
                f"({self.output_tokens})"
            )
        return self

    def build(self) -> LoadModelEngine:
        return LoadModelEngine(self)


def _unit(*parts: object) -> float:
    """A stable number in [0, 1) from `parts` (no Python hash salt)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class LoadModelEngine:
    """A model-free engine whose service time follows a continuous-batching engine.

    Built from its config; `batcher` (a simulated engine of any curve, shared with other
    engines or not) replaces the one of the config's own curve.
    """

    def __init__(
        self, config: LoadModelConfig, *, batcher: ContinuousBatcher | None = None
    ) -> None:
        self.config = config
        self.batcher = config.batcher() if batcher is None else batcher
        self.name = config.model
        self.context_length = config.context_length

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        completion = self.respond(prompt, sampling)
        words = prompt.split()
        if completion.output_tokens == 0:  # context overflow: rejected before prefill
            return completion
        config = self.config
        slow = config.slow_marker is not None and config.slow_marker in prompt
        steps = decode_steps_for(completion.output_tokens, config.slow_factor if slow else 1.0)
        cached = await self.batcher.run(words, completion.text.split(), steps)
        if config.cached_over_sent:  # a lying engine, for tests: clamped as it is made
            cached = completion.input_tokens + config.cached_over_sent
        return replace(completion, cached_tokens=cached)

    def _answer(self, prompt: str, sampling: Sampling) -> str:
        """The answer sentence of an answering completion: `answers`' only one, or one
        drawn by the request's hash."""
        answers = self.config.answers
        if len(answers) == 1:
            return ANSWER_TEXT.replace("42", answers[0])
        pick = int(_unit(self.config.seed, sampling.seed, prompt, "answer") * len(answers))
        return ANSWER_TEXT.replace("42", answers[pick])

    def respond(self, prompt: str, sampling: Sampling) -> Completion:
        """The completion for a request, computed at once (no waiting): deterministic.

        Temperature, top_p and top_k change nothing (there is no model to sample).
        """
        config = self.config
        max_tokens, stop, top_logprobs = sampling.max_tokens, sampling.stop, sampling.top_logprobs
        input_tokens = len(prompt.split())
        if input_tokens >= config.context_length:
            return Completion("", 0, FinishReason.CONTEXT_OVERFLOW, input_tokens)
        draw = _unit(config.seed, sampling.seed, prompt)
        every = config.answer_every
        answer = not stop or (every > 0 and int(draw * 2**32) % every == 0)
        tail = self._answer(prompt, sampling).split() if answer else []
        # The last generated token is the stop string or the end-of-sequence token.
        length = config.output_tokens
        if config.output_tokens_max is not None:
            spread = config.output_tokens_max - config.output_tokens + 1
            length += int(_unit(config.seed, sampling.seed, prompt, "length") * spread)
        needed = max(length, len(tail) + 1)
        if max_tokens < needed:
            words = [_FILLER] * max_tokens
            finish, stop_string = FinishReason.LENGTH, ""
        else:
            words = [_FILLER] * (needed - 1 - len(tail)) + tail
            finish = FinishReason.EOS if answer else FinishReason.STOP_STRING
            stop_string = "" if answer else stop[0]
        generated = max_tokens if finish is FinishReason.LENGTH else needed
        logprobs: tuple[TopLogprobs, ...] = ()
        if top_logprobs > 0:
            yes = 0.05 + 0.9 * draw  # P(Yes) in [0.05, 0.95)
            if yes >= 0.5:
                words = ["Yes", *words[1:]] if words else words
            elif words:
                words = ["No", *words[1:]]
            top = _top(yes, top_logprobs)
            logprobs = tuple(top for _ in range(generated))
        return Completion(
            text=" ".join(words),
            output_tokens=generated,
            finish=finish,
            input_tokens=input_tokens,
            stop_string=stop_string,
            top_logprobs=logprobs,
        )

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
        return plain_chat(messages, continue_final=continue_final)

    async def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    async def close(self) -> None:
        return None


def plain_chat(messages: Sequence[Mapping[str, str]], *, continue_final: bool) -> str:
    """The chat of an engine without a model: "role: content" lines, and an open assistant
    line unless the last message is to be continued."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    if not continue_final:
        lines.append("assistant: ")
    return "\n".join(lines)


def _top(yes: float, k: int) -> TopLogprobs:
    """The k best alternatives: Yes and No share 0.98 of the mass, fillers the rest."""
    entries = [("Yes", 0.98 * yes), ("No", 0.98 * (1 - yes))]
    entries += [(f"tok{i}", 0.02 / max(k - 2, 1)) for i in range(max(k - 2, 0))]
    entries.sort(key=lambda e: e[1], reverse=True)
    return tuple((token, math.log(p)) for token, p in entries[:k])


__all__ = ["ANSWER_TEXT", "LoadModelConfig", "LoadModelEngine", "plain_chat"]
