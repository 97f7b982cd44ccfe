"""llama.cpp on CPU, in-process: the embedded default engine.

`xllamacpp` runs llama.cpp's server inside this process; we talk to it over
loopback HTTP with an async client, using the native `/completion` endpoint
because it reports *why* generation stopped (`stop_type`: eos / word / limit),
which the OpenAI-style answer folds into one "stop".  The paper counts only a
natural end of sequence as an answer, so that distinction matters.

One request per sample: llama.cpp's `n > 1` reports a wrong total token count
(FACTS.md), and separate requests share the prompt through its prefix cache.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from actors.engines.base import (
    Completion,
    EngineCapacity,
    EngineError,
    EngineLoad,
    Sampling,
    TopLogprobs,
)
from actors.engines.prefix_gate import PrefixGate
from actors.models import resolve_model_path
from search.protocols import FinishReason

if TYPE_CHECKING:
    from actors.config import LlamaCppConfig

_STOP_TYPES = {"eos": FinishReason.EOS, "word": FinishReason.STOP_STRING}

# llama.cpp's threads meet at an OpenMP barrier after every operation of every token, and
# libgomp's waiting thread spins about 300,000 times before it sleeps.  That suits a
# process that owns its cores; here two engines (policy and PRM) share two cores with Ray,
# and one engine's spinning threads take the cores the other needs.  Spinning 300 times
# keeps one engine alone as fast and makes two busy engines 3.2x and three 4.9x faster
# (`python -m benchmarks.llamacpp_threads`).  libgomp reads this once, when it is loaded
# (by the first `import xllamacpp` in the process), and a value the user set is kept.
GOMP_SPIN_COUNT = "300"


def spin_briefly_unless_set() -> None:
    """Set libgomp's spin count to `GOMP_SPIN_COUNT` unless the user chose a waiting policy."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPIN_COUNT


class LlamaCppEngine:
    """A GGUF model served by llama.cpp in this process."""

    def __init__(
        self,
        model: str = "embedded",
        *,
        context_length: int = 4096,
        threads: int = 2,
        parallel: int = 4,
        slot_prompt_similarity: float = 0.9,
        cache_ram_mib: int = 8192,
        hold_shared_prefixes: bool = True,
        request_timeout_s: float = 300.0,
        name: str | None = None,
    ) -> None:
        spin_briefly_unless_set()
        try:
            import xllamacpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("the llama.cpp engine needs: pip install xllamacpp") from exc
        path = resolve_model_path(model)
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = context_length * parallel  # llama.cpp splits the context over slots
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.n_parallel = parallel
        params.slot_prompt_similarity = slot_prompt_similarity
        params.cache_ram_mib = cache_ram_mib
        self.name = name or path.stem
        self.context_length = context_length
        self.parallel = parallel
        self._server = xllamacpp.Server(params)
        self._client = httpx.AsyncClient(
            base_url=self._server.listening_address, timeout=request_timeout_s
        )
        # requests that share a prefix not cached yet go one after another (prefix_gate.py)
        self._gate = PrefixGate() if hold_shared_prefixes else None
        # llama.cpp's own per-request timings: prompt tokens it evaluated vs reused
        # from a slot's prefix cache (what tree-affinity routing is meant to raise)
        self.prompt_tokens_evaluated = 0
        self.prompt_tokens_cached = 0
        self.tokens_generated = 0

    @classmethod
    def from_config(cls, config: LlamaCppConfig) -> LlamaCppEngine:
        """From the `engine:` block of a service config (`kind: llamacpp`): every field but
        `kind` and `model` is a keyword of the constructor."""
        return cls(config.model, **config.model_dump(exclude={"kind", "model"}))

    def capacity(self) -> EngineCapacity:
        """llama.cpp's slots, each with its own share of the context (its KV cache)."""
        seen = self.prompt_tokens_evaluated + self.prompt_tokens_cached
        return EngineCapacity(
            max_seqs=self.parallel,
            kv_tokens=self.parallel * self.context_length,
            context_length=self.context_length,
            prefix_hit_rate=self.prompt_tokens_cached / seen if seen else None,
        )

    def load(self) -> EngineLoad:
        """Slots and the prompt-token counters from llama.cpp's per-request timings; the
        busy slots are not known without asking the server (None here: the serving
        replica's `_CountingEngine.load` stands in its count of engine calls in flight)."""
        return EngineLoad(
            max_seqs=self.parallel,
            prompt_tokens=self.prompt_tokens_evaluated + self.prompt_tokens_cached,
            cached_prompt_tokens=self.prompt_tokens_cached,
        )

    def cache_stats(self) -> dict[str, int]:
        return {
            "prompt_tokens_evaluated": self.prompt_tokens_evaluated,
            "prompt_tokens_cached": self.prompt_tokens_cached,
            "tokens_generated": self.tokens_generated,
            "requests_held_for_a_shared_prefix": self._gate.waits if self._gate else 0,
        }

    async def _post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        return await self._client.post(path, json=dict(body))

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": sampling.max_tokens,
            "stop": list(sampling.stop),
            "temperature": sampling.temperature,
            "seed": sampling.seed,
            "cache_prompt": True,
        }
        if sampling.top_logprobs:
            body["n_probs"] = sampling.top_logprobs
        if sampling.top_p is not None:
            body["top_p"] = sampling.top_p
        if sampling.top_k is not None:
            body["top_k"] = sampling.top_k
        if self._gate is None:
            return await self._send(body, sampling.max_tokens)
        async with self._gate.turn(prompt) as turn:
            completion = await self._send(body, sampling.max_tokens)
            if completion.finish is not FinishReason.ERROR:
                turn.completed(completion.text)
        return completion

    async def _send(self, body: Mapping[str, Any], max_tokens: int) -> Completion:
        try:
            response = await self._post("/completion", body)
        except (httpx.HTTPError, OSError) as exc:
            return Completion("", 0, FinishReason.ERROR, error=f"llama.cpp request failed: {exc}")
        data = response.json()
        if response.status_code != 200:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            if error.get("type") == "exceed_context_size_error":
                return Completion(
                    "", 0, FinishReason.CONTEXT_OVERFLOW, int(error.get("n_prompt_tokens", 0))
                )
            message = error.get("message", response.text[:200])
            return Completion("", 0, FinishReason.ERROR, error=f"llama.cpp: {message}")
        return self._completion(data, max_tokens)

    def _completion(self, data: Mapping[str, Any], max_tokens: int) -> Completion:
        generated = int(data.get("tokens_predicted", 0))
        timings = data.get("timings") or {}
        self.prompt_tokens_evaluated += int(timings.get("prompt_n", 0))
        self.prompt_tokens_cached += int(timings.get("cache_n", 0))
        self.tokens_generated += generated
        prompt_tokens = int(data.get("tokens_evaluated", 0))
        finish = _STOP_TYPES.get(str(data.get("stop_type")), FinishReason.LENGTH)
        if finish is FinishReason.LENGTH and generated < max_tokens:
            # Stopped by the limit before max_tokens: the context slot is full.
            finish = FinishReason.CONTEXT_OVERFLOW
        return Completion(
            text=str(data.get("content", "")),
            output_tokens=generated,
            finish=finish,
            input_tokens=prompt_tokens,
            stop_string=str(data.get("stopping_word", "")),
            top_logprobs=_top_logprobs(data.get("completion_probabilities") or ()),
            cached_tokens=int(timings.get("cache_n", 0)),
        )

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        response = await self._post("/apply-template", {"messages": [dict(m) for m in messages]})
        if response.status_code != 200:
            raise EngineError(f"llama.cpp could not apply the chat template: {response.text}")
        # llama.cpp leaves a final assistant message open (a prefill) and appends the
        # assistant header after a final user message, which is what both modes need.
        return str(response.json()["prompt"])

    async def tokenize(self, text: str) -> list[int]:
        response = await self._post("/tokenize", {"content": text, "add_special": False})
        if response.status_code != 200:
            raise EngineError(f"llama.cpp could not tokenize: {response.text}")
        return [int(t) for t in response.json()["tokens"]]

    async def close(self) -> None:
        await self._client.aclose()
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        server, self._server = self._server, None
        del server


def _top_logprobs(entries: Sequence[Mapping[str, Any]]) -> tuple[TopLogprobs, ...]:
    return tuple(
        tuple((str(t.get("token", "")), float(t["logprob"])) for t in e.get("top_logprobs", ()))
        for e in entries
    )
