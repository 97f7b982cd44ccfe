"""llama.cpp on CPU, in-process: the embedded default engine.

`xllamacpp` runs llama.cpp's server inside this process; we talk to it over
loopback HTTP with an async client, using the native `/completion` endpoint
because it reports *why* generation stopped (`stop_type`: eos / word / limit),
which the OpenAI-style answer folds into one "stop".  The paper counts only a
natural end of sequence as an answer, so that distinction matters.

One request per sample: llama.cpp's `n > 1` reports a wrong total token count
(FACTS.md), and separate requests share the prompt through its prefix cache.

`xllamacpp` and `httpx` are imported only where the engine runs: the config is read
where the run starts, which need not have them (httpx alone takes longer to import than the config).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from actors.engines.base import (
    Completion,
    EngineCapacity,
    EngineConfigBase,
    EngineError,
    EngineLoad,
    Package,
    Sampling,
    Threads,
    TopLogprobs,
)
from actors.engines.gguf_file import GGUFError, read_gguf
from actors.engines.memory import check_fits, size
from actors.engines.prefix_gate import PrefixGate
from actors.engines.read_counts import checked_counts, count
from actors.json_file import first_line
from actors.models import resolve_model_path
from search.protocols import FinishReason

if TYPE_CHECKING:
    import httpx

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


class LlamaCppConfig(EngineConfigBase):
    """llama.cpp in-process (the CPU default); `model: embedded` is SmolLM2-135M-Instruct."""

    packages: ClassVar[tuple[Package, ...]] = (Package("xllamacpp", "xllamacpp"),)

    kind: Literal["llamacpp"] = Field("llamacpp", description="llama.cpp in the replica (CPU)")
    model: str = Field(
        "embedded", description="path to a GGUF file; embedded: the bundled SmolLM2-135M-Instruct"
    )
    context_length: int = Field(
        4096,
        ge=256,
        description="tokens of one sequence (prompt and completion) per slot; llama.cpp gets "
        "context_length x parallel. Refused beyond the context the GGUF was trained on, or "
        "where that KV cache and the model would take more than the machine's memory",
    )
    threads: Threads = 2
    parallel: int = Field(4, ge=1, description="concurrent sequences (llama.cpp slots)")
    slot_prompt_similarity: float = Field(
        0.9,
        ge=0,
        le=1,
        description="llama.cpp takes an idle slot whose cached prompt covers more than this "
        "share of a request's prompt; otherwise the least recently used slot, after loading "
        "the request's longest cached prefix from the host-RAM prompt cache (0: always the "
        "least recently used slot)",
    )
    cache_ram_mib: int = Field(
        8192,
        ge=-1,
        description="host memory for llama.cpp's prompt cache, where a slot's state is kept "
        "when another prompt takes the slot (0: off; -1: no limit); refused beyond the "
        "machine's memory",
    )
    hold_shared_prefixes: bool = Field(
        True,
        description="a request waits while one in flight shares more of its prompt than "
        "llama.cpp has cached (siblings of one node), so that the shared part is computed "
        "once (actors/engines/prefix_gate.py)",
    )

    def check_model(self) -> str | None:
        """The GGUF file must be here and whole: llama.cpp is the CPU engine, run where the
        config is (a wrong path is a typo to fix before the run, not a file on other
        nodes).  See `check_gguf`."""
        self.check_gguf()
        return None

    def check_gguf(self) -> Path:
        """The model's GGUF, read whole (`actors.engines.gguf_file`), and the fields that
        size what llama.cpp allocates from it: `context_length` within the context the
        model was trained on, and the KV cache (`context_length` x `parallel` tokens) and
        prompt cache (`cache_ram_mib`) within this machine's memory.  Raises an
        EngineError naming the field; returns the GGUF's path."""
        path = resolve_model_path(self.model)
        try:
            gguf = read_gguf(path)
        except GGUFError as exc:
            raise EngineError(f"engine.model: {exc}", field="engine.model") from None
        trained = gguf.trained_context
        if trained is not None and self.context_length > trained:
            raise EngineError(
                f"engine.context_length: {self.context_length:,} tokens is beyond the "
                f"{trained:,} that {path.name} was trained on ({gguf.architecture}."
                "context_length in the GGUF); lower it",
                field="engine.context_length",
            )
        per_token = gguf.kv_bytes_per_token()
        if per_token is not None:
            tokens = self.context_length * self.parallel
            check_fits(
                "engine.context_length",
                tokens * per_token + gguf.size,
                f"{self.context_length:,} tokens x parallel {self.parallel:,} of llama.cpp's KV "
                f"cache ({per_token:,} bytes a token) and the model's {size(gguf.size)}",
            )
        if self.cache_ram_mib > 0:
            check_fits(
                "engine.cache_ram_mib",
                self.cache_ram_mib * 2**20,
                f"llama.cpp's prompt cache of {self.cache_ram_mib:,} MiB",
            )
        return path

    def build(self) -> LlamaCppEngine:
        return LlamaCppEngine(self)


# How long one request to the in-process server may take before it fails.
REQUEST_TIMEOUT_S = 300.0


class LlamaCppEngine:
    """A GGUF model served by llama.cpp in this process."""

    def __init__(self, config: LlamaCppConfig) -> None:
        spin_briefly_unless_set()
        try:
            import xllamacpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("the llama.cpp engine needs: pip install xllamacpp") from exc
        import httpx

        # checked again where the engine loads: a file changed since the run's own check
        # fails with its cause, not with llama.cpp's "Failed to init server"
        path = config.check_gguf()
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        # llama.cpp splits the context over slots
        params.n_ctx = config.context_length * config.parallel
        params.cpuparams.n_threads = config.threads
        params.cpuparams_batch.n_threads = config.threads
        params.n_parallel = config.parallel
        params.slot_prompt_similarity = config.slot_prompt_similarity
        params.cache_ram_mib = config.cache_ram_mib
        self.name = path.stem
        self.context_length = config.context_length
        self.parallel = config.parallel
        try:
            self._server = xllamacpp.Server(params)
        except RuntimeError as exc:  # llama.cpp says only "Failed to init server"
            raise EngineError(
                f"engine.model: llama.cpp could not load {path} ({first_line(exc)}; its "
                "reasons are in the replica's log)",
                field="engine.model",
            ) from None
        self._client = httpx.AsyncClient(
            base_url=self._server.listening_address, timeout=REQUEST_TIMEOUT_S
        )
        # requests that share a prefix not cached yet go one after another (prefix_gate.py)
        self._gate = PrefixGate() if config.hold_shared_prefixes else None
        # llama.cpp's own per-request timings: prompt tokens it evaluated vs reused
        # from a slot's prefix cache (what tree-affinity routing is meant to raise)
        self.prompt_tokens_evaluated = 0
        self.prompt_tokens_cached = 0
        self.tokens_generated = 0

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
        import httpx

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
        timings = data.get("timings")
        timings = timings if isinstance(timings, Mapping) else {}
        # the server's counts checked as they enter: the hit rate admission steers by is
        # built on them (`actors.engines.read_counts`); the faults go with the answer
        faults: set[str] = set()
        prompt_tokens, cached, generated = checked_counts(
            data.get("tokens_evaluated", 0),
            timings.get("cache_n", 0),
            data.get("tokens_predicted", 0),
            faults=faults,
        )
        computed = count(timings.get("prompt_n", 0), "computed prompt tokens", faults=faults)
        self.prompt_tokens_evaluated += computed
        self.prompt_tokens_cached += cached
        self.tokens_generated += generated
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
            cached_tokens=cached,
            count_faults=frozenset(faults),
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
