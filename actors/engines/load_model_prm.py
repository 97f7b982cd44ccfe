"""A one-pass PRM's timing without a model: the load model's batcher, scoring instead of decoding.

`LoadModelPRMEngine` is a `StepScoringEngine` (actors/engines/base.py) whose requests
wait as long as they would inside a continuous-batching engine's pooling runner (vLLM's
``--runner pooling``): the path is laid out as every one-pass engine lays it out
(`actors.engines.step_layout`: [bos] + prompt + each step + its separator), its tokens
the prefix cache does not hold are prefilled at `prefill_tokens_per_s`, and one forward
step reads the values at the separators; nothing is decoded.  The batcher
(`actors.engines.batching.ContinuousBatcher`) is the load model's: the same curve, LRU
prefix cache and `max_seqs`, so a child whose parent was scored pays only for its own
step, as on vLLM with automatic prefix caching and the cache read (`vllm_pooling`'s
`read_prefix_cache`; `read_prefix_cache=False` is vLLM's default for token
classification: the cache written, never read, every path computed whole).  Passing the batcher of a
`LoadModelEngine` puts a policy and its PRM on one simulated GPU.

Tokens are whitespace words (as the load model counts them), each
distinct word one id; a whitespace-only text such as the default separator "\\n" is a
single token of its own.  Values are a stable hash of the path up to each step (in
(0, 1)), so the same path always gets the same values; they mean nothing, timing is
what this engine is for.  That is why it is not a `OnePassEngine`
(`actors.engines.one_pass_engine`): there are no rows of logits to read.  It still lays
out and refuses paths as those engines do: one longer than the context, or with no step,
is answered before any prefill (`step_layout.unscorable`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from pydantic import Field

from actors.engines.base import StepValues
from actors.engines.batching import ContinuousBatcher
from actors.engines.load_model import LoadCurveConfig, plain_chat
from actors.engines.step_layout import layout, separator_id, unscorable
from actors.engines.vocabulary import whitespace_words

BOS = "<bos>"


class LoadModelPRMConfig(LoadCurveConfig):
    """No model: a one-pass PRM's timing on a continuous-batching engine (load_model_prm.py).

    A scoring request prefills the uncached tokens of its path (the prefix cache
    serves the parent's) and runs one forward step; nothing is decoded (vLLM's pooling
    runner).  The curve's defaults are `load_model`'s: a 7-8B model on one H100 80GB.
    """

    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = "actors.engines.vocabulary:words"

    kind: Literal["load_model_prm"] = Field(
        "load_model_prm", description="no model: a one-pass PRM's continuous-batching timing"
    )
    model: str = Field("load-model-prm", description="the name the engine reports")
    context_length: int = Field(
        4096, ge=256, description="the longest path scored; a longer one is an error value"
    )
    seed: int = Field(0, description="seeds the step values (a hash of the path)")
    read_prefix_cache: bool = Field(
        True,
        description="a path's cached prefix is not computed again (`vllm_pooling` reading "
        "vLLM's cache); false: every path computed whole (vLLM's default for token "
        "classification)",
    )

    def build(self, *, step_separator: str) -> LoadModelPRMEngine:
        return LoadModelPRMEngine(self, step_separator=step_separator)


class LoadModelPRMEngine:
    """A model-free one-pass PRM whose service time follows a continuous-batching engine.

    Built from its config and the scorer's step separator; `batcher` (another engine's,
    e.g. a `LoadModelEngine`'s) puts both on one simulated GPU, whose curve is then that
    engine's (None: a batcher of this config's own curve).
    """

    def __init__(
        self,
        config: LoadModelPRMConfig,
        *,
        step_separator: str,
        batcher: ContinuousBatcher | None = None,
    ) -> None:
        self.batcher = config.batcher() if batcher is None else batcher
        self.context_length = config.context_length
        self.separator = step_separator
        self.seed = config.seed
        self.name = config.model
        self.read_prefix_cache = config.read_prefix_cache
        self.cached_over_sent = config.cached_over_sent
        self._vocabulary: dict[str, int] = {}
        # refused here, as every one-pass engine refuses it when it loads
        self.separator_token = separator_id(self._ids, step_separator)

    def _ids(self, text: str) -> list[int]:
        vocabulary = self._vocabulary
        return [vocabulary.setdefault(w, len(vocabulary)) for w in whitespace_words(text)]

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        bos = self._ids(BOS)[0]
        path = layout(self._ids, prompt, steps, self.separator_token, bos)
        refused = unscorable(path, self.context_length)  # as a real engine refuses it
        if refused is not None:
            return refused
        ids = path.input_ids
        tokens = [str(i) for i in ids]
        # prefill what is not cached (all of it when the cache is not read), one forward step;
        # the batcher counts the hit as vLLM does, when the path is admitted
        cached = await self.batcher.run(tokens, (), 1, read_cache=self.read_prefix_cache)
        if self.cached_over_sent:  # a lying engine, for tests: clamped as it is made
            cached = len(ids) + self.cached_over_sent
        return StepValues(self._values(prompt, steps), len(ids), cached)

    def _values(self, prompt: str, steps: Sequence[str]) -> tuple[float, ...]:
        """Each step's value: a hash of the path up to it, strictly inside (0, 1)."""
        key = hashlib.blake2b(f"{self.seed}\x1f{prompt}".encode(), digest_size=16).digest()
        values = []
        for step in steps:
            key = hashlib.blake2b(key + step.encode(), digest_size=16).digest()
            values.append((int.from_bytes(key[:8], "big") + 0.5) / 2**64)
        return tuple(values)

    def stats(self) -> dict[str, float]:
        """The batcher's counters since start (shared with a policy engine on one batcher)."""
        stats = self.batcher.stats
        return {
            "requests": stats.requests,
            "prompt_tokens": stats.prompt_tokens,
            "cached_prompt_tokens": stats.cached_prompt_tokens,
            "prefill_tokens": stats.prefill_tokens,
            "work_s": stats.work_s,
        }

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        return plain_chat(messages, continue_final=continue_final)

    async def tokenize(self, text: str) -> list[int]:
        return self._ids(text)

    async def close(self) -> None:
        return None


__all__ = ["LoadModelPRMConfig", "LoadModelPRMEngine"]
