"""A continuous-batching engine's service time, simulated: the heart of the load model.

What is modelled (as vLLM and SGLang schedule a GPU):

* **Decode steps.** Every step advances each running sequence by one token; a step
  with b sequences in flight holding c context tokens between them takes
  ``decode_base_s + decode_per_seq_s * b + decode_per_context_token_s * c`` (the last
  term is attention reading every sequence's KV cache: 0 by default, as the public
  figures the default curve comes from already average over their own contexts;
  `benchmarks/gpu_step_costs.py` measured it on a GPU).  Within a stretch of steps with
  the same batch the context grows by b tokens a step; the stretch is priced at its
  mean context, which is exact for a cost linear in context.
* **Prefill.** A sequence admitted at a step boundary adds its *uncached* prompt tokens
  / ``prefill_tokens_per_s`` to that step (chunked prefill: the step that carries the
  prefill also gives the sequence its first token).
* **Prefix cache.** An LRU cache of ``cache_tokens`` tokens in blocks of
  ``block_tokens``, keyed by the chain of block contents (vLLM's automatic prefix
  caching); a finished sequence leaves its prompt and its output in the cache, so a
  child whose prompt is its parent's path pays only for the new tokens.
* **A maximum number of sequences.** At most ``max_seqs`` run at once; the rest wait
  in arrival order and are admitted when a sequence finishes.

* **KV capacity shared by running and cached tokens.** ``cache_tokens`` is the whole
  KV cache.  A sequence's prompt is looked up and its blocks cached when it is admitted
  (prefilled), so a sibling admitted later shares them; its output tokens are held
  outside the cache while it runs (reserved in full at admission) and cached when it
  ends; the prefix cache keeps what is left, evicting least recently used blocks
  (``PrefixCache.pin``).  A cache of 0 tokens means prefix caching off (and KV
  capacity not modelled).  A sequence whose tokens
  do not fit waits (unless nothing runs), as vLLM's scheduler waits for free blocks.
  Every eviction is counted; an evicted context is prefilled again at the curve's
  prefill rate when a later request needs it.

Not modelled: preemption of running sequences, speculative decoding, prefill cost
that grows with the cached context it attends to (measured on a GPU: new tokens after 3k
cached ones run at 0.84 of the flat rate, after 8k at 0.66; `benchmarks/gpu_step_costs.py`).

The ceiling: a full batch of ``max_seqs`` sequences gives
``max_seqs / step_s(max_seqs)`` decode tokens per second, and a request costs the
engine ``work_s = decode_steps * step_s(max_seqs) / max_seqs + uncached / prefill``
seconds at that best operating point.  Summed work over a wall-clock window is the
engine's utilisation against its own ceiling (1.0: it never ran below a full batch).

Time is simulated with ``asyncio`` timers, one timer per scheduling event (an arrival
or the next sequence to finish), not one per token, so the simulation itself costs
little CPU.  ``time_scale`` multiplies every duration (0.1: ten times faster than the
modelled GPU, for tests; 10: ten times slower, so a 2-core machine can keep up).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineCurve:
    """The service-time curve of one engine (seconds at ``time_scale`` 1)."""

    decode_base_s: float
    decode_per_seq_s: float
    prefill_tokens_per_s: float
    max_seqs: int
    decode_per_context_token_s: float = 0.0  # attention over the batch's KV, per token

    def step_s(self, seqs: int, context_tokens: float = 0.0) -> float:
        """Duration of one decode step with `seqs` sequences holding `context_tokens`."""
        return (
            self.decode_base_s
            + self.decode_per_seq_s * seqs
            + self.decode_per_context_token_s * context_tokens
        )

    @property
    def ceiling_decode_tokens_per_s(self) -> float:
        """Decode tokens per second with a full batch of empty contexts: the engine's
        own ceiling (with a context cost, `ceiling_at` gives it at a given context)."""
        return self.ceiling_at(0.0)

    def ceiling_at(self, context_per_seq: float) -> float:
        """Decode tokens per second with a full batch whose sequences hold this context."""
        return self.max_seqs / self.step_s(self.max_seqs, self.max_seqs * context_per_seq)

    def work_s(
        self, decode_steps: int, prefill_tokens: int, context_token_steps: float = 0.0
    ) -> float:
        """Engine seconds a request costs at the ceiling's operating point (a full batch):
        `context_token_steps` is its context summed over its decode steps."""
        return (
            decode_steps / self.ceiling_decode_tokens_per_s
            + context_token_steps * self.decode_per_context_token_s
            + prefill_tokens / self.prefill_tokens_per_s
        )


class PrefixCache:
    """LRU cache of prompt blocks, keyed by the hash chain of their contents."""

    def __init__(self, capacity_tokens: int, block_tokens: int = 16) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_tokens // block_tokens
        self.pinned_blocks = 0  # held by running sequences: not available to the cache
        self.evicted_blocks = 0
        self._blocks: OrderedDict[int, None] = OrderedDict()

    @property
    def capacity_tokens(self) -> int:
        return self.capacity_blocks * self.block_tokens

    def pin(self, tokens: int) -> None:
        """Running sequences hold `tokens` of the KV cache; evict LRU blocks to make room."""
        self.pinned_blocks = min(self.capacity_blocks, -(-max(tokens, 0) // self.block_tokens))
        self._evict()

    def _evict(self) -> None:
        room = self.capacity_blocks - self.pinned_blocks
        while len(self._blocks) > room:
            self._blocks.popitem(last=False)
            self.evicted_blocks += 1

    def keys(self, tokens: Sequence[str]) -> list[int]:
        """One key per *full* block: the hash of the previous key and the block's tokens."""
        keys: list[int] = []
        previous = 0
        size = self.block_tokens
        for start in range(0, len(tokens) - size + 1, size):
            previous = hash((previous, tuple(tokens[start : start + size])))
            keys.append(previous)
        return keys

    def cached_blocks(self, keys: Sequence[int]) -> int:
        """How many leading blocks are cached (each hit becomes the most recently used)."""
        hits = 0
        for key in keys:
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            hits += 1
        return hits

    def insert(self, keys: Sequence[int]) -> None:
        if self.capacity_blocks == 0:
            return
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        self._evict()


@dataclass
class _Sequence:
    decode_steps: int
    prompt_keys: list[int]  # prompt blocks, cached once prefilled (at admission)
    prompt_len: int
    keys_after: list[int]  # prompt + output blocks, cached when the sequence finishes
    done: asyncio.Future[None]
    uncached: int = 0
    read_cache: bool = True  # False: its prompt is computed whole (and still cached)

    @property
    def kv_tokens(self) -> int:
        """KV tokens it holds outside the prefix cache while running: its output (its
        prompt's blocks are cache blocks from admission on, shared with siblings)."""
        return self.decode_steps


@dataclass
class BatcherStats:
    """Counters since the engine started (simulated seconds, i.e. before time_scale)."""

    requests: int = 0
    finished: int = 0
    decode_steps: int = 0  # steps the engine ran
    decode_tokens: int = 0  # sequence-steps: one token per running sequence per step
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    prefill_tokens: int = 0
    context_tokens: float = 0.0  # context held by the batch, summed over decode steps
    work_s: float = 0.0  # see EngineCurve.work_s
    busy_s: float = 0.0  # time with at least one sequence running
    max_running: int = 0
    evicted_tokens: int = 0  # prefix-cache tokens evicted to make room (LRU)
    kv_waits: int = 0  # admissions put off because the KV cache was full
    first_arrival: float | None = None  # time.monotonic(): comparable across processes
    last_finish: float | None = None


class ContinuousBatcher:
    """Admits requests into a simulated batch and resolves each when its last token is out."""

    def __init__(self, curve: EngineCurve, cache: PrefixCache, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.curve = curve
        self.cache = cache
        self.time_scale = time_scale
        self.stats = BatcherStats()
        self._waiting: deque[_Sequence] = deque()
        self._running: list[tuple[int, int, _Sequence]] = []  # (finish step, order, seq)
        self._order = itertools.count()
        self._step = 0
        self._running_kv = 0  # KV tokens the running sequences hold
        # Sum over running sequences of (prompt length - step admitted): the batch's
        # context at step s is this plus batch * s (each sequence grows a token a step).
        self._context_offset = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def run(
        self,
        prompt: Sequence[str],
        output: Sequence[str],
        decode_steps: int,
        *,
        read_cache: bool = True,
    ) -> int:
        """Wait until a request with this prompt and `decode_steps` tokens has been served;
        the prompt tokens its prefix cache served (what was not computed).  `read_cache`
        False: the prompt is computed whole and written to the cache (vLLM's default for
        a token-classification request)."""
        loop = asyncio.get_running_loop()
        sequence = _Sequence(
            decode_steps=max(decode_steps, 1),
            prompt_keys=self.cache.keys(prompt),
            prompt_len=len(prompt),
            keys_after=self.cache.keys([*prompt, *output]),
            done=loop.create_future(),
            read_cache=read_cache,
        )
        self.stats.requests += 1
        if self.stats.first_arrival is None:
            self.stats.first_arrival = loop.time()
        self._waiting.append(sequence)
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._loop())
        assert self._wake is not None
        self._wake.set()
        await sequence.done
        return sequence.prompt_len - sequence.uncached

    def _admit(self) -> int:
        prefill = 0
        capacity = self.cache.capacity_tokens
        cache, stats = self.cache, self.stats
        while self._waiting and len(self._running) < self.curve.max_seqs:
            sequence = self._waiting[0]
            # The prefix is looked up when the sequence is admitted (as vLLM's scheduler
            # does): a sibling admitted after its twin finds the prompt the twin prefilled.
            hit = cache.cached_blocks(sequence.prompt_keys) * cache.block_tokens
            # As vLLM counts a hit: whole blocks only, and never the prompt's last token (its
            # logits start the decoding), so a prompt cached whole still computes the block
            # that holds its last token; nothing at all when the cache is not read.
            whole = max(sequence.prompt_len - 1, 0) // cache.block_tokens * cache.block_tokens
            hit = min(hit, whole) if sequence.read_cache else 0
            uncached = sequence.prompt_len - hit
            over = capacity and self._running_kv + uncached + sequence.kv_tokens > capacity
            if over and self._running:
                stats.kv_waits += 1  # no free KV blocks: wait for a sequence to end
                break
            self._waiting.popleft()
            sequence.uncached = uncached
            stats.prompt_tokens += sequence.prompt_len
            stats.cached_prompt_tokens += sequence.prompt_len - uncached
            self._running_kv += sequence.kv_tokens
            before = cache.evicted_blocks
            cache.insert(sequence.prompt_keys)  # prefilled now: its blocks are cached
            stats.evicted_tokens += (cache.evicted_blocks - before) * cache.block_tokens
            prefill += uncached
            finish = self._step + sequence.decode_steps
            self._context_offset += sequence.prompt_len - self._step
            heapq.heappush(self._running, (finish, next(self._order), sequence))
        self._pin()
        return prefill

    def _pin(self) -> None:
        before = self.cache.evicted_blocks
        self.cache.pin(self._running_kv)
        self.stats.evicted_tokens += (self.cache.evicted_blocks - before) * self.cache.block_tokens

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        assert wake is not None
        curve, scale = self.curve, self.time_scale
        while True:
            if not self._running and not self._waiting:
                wake.clear()
                await wake.wait()
                continue
            prefill = self._admit()
            batch = len(self._running)
            self.stats.max_running = max(self.stats.max_running, batch)
            self.stats.prefill_tokens += prefill
            to_next = self._running[0][0] - self._step  # steps until a sequence finishes
            context = self._context_offset + batch * (self._step + (to_next - 1) / 2)
            step_s = curve.step_s(batch, context)
            first_s = step_s + prefill / curve.prefill_tokens_per_s
            planned = first_s + (to_next - 1) * step_s
            started = loop.time()
            wake.clear()
            # An arrival can join at the next step boundary only while there is room.
            timer = loop.call_later(planned * scale, wake.set)
            if batch < curve.max_seqs:
                await wake.wait()
            else:
                await asyncio.sleep(planned * scale)
            timer.cancel()
            elapsed = (loop.time() - started) / scale
            if elapsed >= planned:
                steps, ran_s = to_next, planned
            else:  # woken by an arrival: finish the step in progress, then admit it
                in_progress = 0 if elapsed < first_s else 1 + int((elapsed - first_s) / step_s)
                steps = min(in_progress + 1, to_next)
                ran_s = first_s + (steps - 1) * step_s
                await asyncio.sleep(max(ran_s - elapsed, 0.0) * scale)
            self._step += steps
            self.stats.decode_steps += steps
            self.stats.decode_tokens += steps * batch
            self.stats.context_tokens += steps * (
                self._context_offset + batch * (self._step - steps + (steps - 1) / 2)
            )
            self.stats.busy_s += ran_s
            while self._running and self._running[0][0] <= self._step:
                finish, _, sequence = heapq.heappop(self._running)
                self.stats.finished += 1
                n = sequence.decode_steps
                self.stats.work_s += curve.work_s(
                    n, sequence.uncached, n * sequence.prompt_len + n * (n - 1) / 2
                )
                self._running_kv -= sequence.kv_tokens
                self._context_offset -= sequence.prompt_len - (finish - n)
                self._pin()
                before = self.cache.evicted_blocks
                self.cache.insert(sequence.keys_after)
                self.stats.evicted_tokens += (
                    self.cache.evicted_blocks - before
                ) * self.cache.block_tokens
                self.stats.last_finish = loop.time()
                if not sequence.done.done():  # a cancelled caller leaves a done future
                    sequence.done.set_result(None)


def decode_steps_for(tokens: int, slow_factor: float) -> int:
    """Batch steps a sequence of `tokens` occupies (a slow request stays `slow_factor` longer)."""
    return max(1, math.ceil(tokens * slow_factor))


__all__ = [
    "BatcherStats",
    "ContinuousBatcher",
    "EngineCurve",
    "PrefixCache",
    "decode_steps_for",
]
