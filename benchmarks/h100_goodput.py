"""Goodput at the shape of a real GPU: `python -m benchmarks.engine_saturation --h100`.

One load-model engine at its H100 defaults (`actors/engines/load_model.py`: decode
step 7.4 ms + 0.051 ms per sequence, `max_seqs` 256, prefill 24,000 tokens/s, a
400,000-token KV cache shared by running sequences and LRU-cached prefixes; or the
GPU-measured curve, `CURVES`) serves both the policy and GenPRM (`Setting.shared`;
one engine each is the other option) for BG-MCTS trees of realistic length: problem prompts
of ~300 tokens, steps of 64-512 tokens (drawn per request), B = 10,000 output tokens,
k = 2, GenPRM analyses of 128-1,024 tokens.  The search core, the real `EnginePolicy`
and `GenPRMScorer` clients and both engines run on one asyncio loop in this process
(no Ray, no Serve: at a thousand trees the 2-core machine cannot host the Ray pipeline,
and what this measures is what the engines see; Serve's CPU per request is
`benchmarks/coalescing_cpu.py`).  Trees stream: each of the N tree slots starts a new
problem when its tree ends.

Per setting, over a window after a warm-up (simulated seconds, i.e. before time_scale):

* decode util p/s: each engine's decode tokens / (window x its decode ceiling);
* hit: prompt tokens served from the prefix cache / prompt tokens, both engines;
* prefill/decode: prompt tokens prefilled / decode tokens;
* goodput: decode tokens/s of the search's own output (policy steps and GenPRM
  analyses and judgements) / the engines' decode ceiling (every decode token here
  belongs to a search: nothing else runs);
* mean context: tokens each running sequence held, averaged over decode tokens;
* goodput at that context: the same decode tokens/s over the ceiling of a full batch
  at that mean context (equal to goodput when the curve has no context cost, as the
  assumed curve has not; `--h100-curve measured` has one);
* engine util: work at the ceiling's operating point (decode and prefill) / window;
* our CPU: this process's CPU seconds per simulated second (the search, the clients and
  the engine simulation together; below 1, one core would keep up with the two engines
  in real time: the driver is not the limit).

Admission on: trees in flight start at `actors.admission.trees_in_flight` (the engine's
`capacity()`: slots, KV tokens, and the tree's estimated shape) and are steered every 10
simulated seconds by `actors.admission.AdmissionController` from the engine's batch
(running + waiting vs `max_seqs`) and its prefix hit rate over the interval, capped by
the setting's count; new trees start only below the target, so running trees (whose
contexts are cached) always go first.  The trees column is the mean number in flight
over the window.  Off: the hand-set count, always.
"""

from __future__ import annotations

import asyncio
import itertools
import resource
import selectors
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from actors.admission import AdmissionController, TreeShape, search_tree_shape, trees_in_flight
from actors.config import GenPRMSettings
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache
from actors.engines.load_model import LoadModelConfig, LoadModelEngine
from actors.genprm import GenPRMScorer
from actors.policy import EnginePolicy
from search import SearchConfig, parse_search_config, run_search
from search.scorer_kinds import GENPRM

H100 = EngineCurve(
    decode_base_s=0.0074, decode_per_seq_s=0.000051, prefill_tokens_per_s=24_000.0, max_seqs=256
)
# `--h100-curve measured`: the step costs `benchmarks/gpu_step_costs.py` measured at the
# torch level on an H200 for the Llama-3.1-8B shape (2026-11-26: base 5.7 ms, 0.0138 ms
# per sequence plus 33 ns per context token, prefill 33,000-38,000 tokens/s by prompt
# shape, 37,000 taken for the curve), with the decode
# terms scaled to an H100 SXM by memory bandwidth (4.8 / 3.35 TB/s: decode reads weights
# and KV) and prefill kept (compute-bound; both chips have the same bf16 peak).  At
# ShareGPT-like contexts (~500 tokens) it gives 19.3 ms per full-batch step, against the
# public 20.4 ms the assumed curve is drawn through; at this benchmark's contexts of
# thousands of tokens a step costs far more.
H100_MEASURED = EngineCurve(
    decode_base_s=0.0082,
    decode_per_seq_s=0.0000195,
    prefill_tokens_per_s=37_000.0,
    max_seqs=256,
    decode_per_context_token_s=47.6e-9,
)
CURVES = {"assumed": H100, "measured": H100_MEASURED}
BUDGET = 10_000
PROMPT_WORDS = 300
STEP = (64, 512)
ANALYSIS = (128, 1024)
K = 2


@dataclass
class Setting:
    trees: int  # hand-set trees in flight (admission off) or the cap (admission on)
    inflight: int
    admission: bool
    shared: bool = True  # policy and GenPRM on one engine (else one engine each)


def _problem(i: int) -> str:
    words = " ".join(f"t{i}.{j}" for j in range(PROMPT_WORDS))
    return f"Problem {i}: {words} What is {i} + {i}?"


def h100_engine(
    curve: EngineCurve,
    name: str,
    lengths: tuple[int, int],
    seed: int,
    *,
    cache_tokens: int = 400_000,
    time_scale: float = 1.0,
) -> LoadModelEngine:
    """A load-model engine at the H100's shape: outputs of `lengths` (STEP for the policy,
    ANALYSIS for GenPRM), a 32K context and an answer every 8 steps."""
    config = LoadModelConfig(
        model=name,
        output_tokens=lengths[0],
        output_tokens_max=lengths[1],
        context_length=32_768,
        answer_every=8,
        seed=seed,
    )
    batcher = ContinuousBatcher(curve, PrefixCache(cache_tokens, 16), time_scale)
    return LoadModelEngine(config, batcher=batcher)


def _engines(
    time_scale: float, shared: bool, curve: EngineCurve
) -> tuple[LoadModelEngine, LoadModelEngine]:
    def engine(name: str, lengths: tuple[int, int], seed: int) -> LoadModelEngine:
        return h100_engine(curve, name, lengths, seed, time_scale=time_scale)

    if shared:  # one engine serves both roles; lengths up to the longer cap
        one = engine("h100", (STEP[0], ANALYSIS[1]), 1)
        return one, one
    return engine("policy", STEP, 1), engine(GENPRM, ANALYSIS, 2)


def admitted_trees(setting: Setting, policy: LoadModelEngine, scorer: LoadModelEngine) -> int:
    """Admission on: from the engines' capacity and the tree's shape (estimates: the
    path being extended is half of B / k deep on average; GenPRM's conversation holds
    the path and an analysis per step, about three times the policy's)."""
    if not setting.admission:
        return setting.trees
    step_mean = sum(STEP) / 2
    path = BUDGET / K / 2
    policy_shape = search_tree_shape(
        prompt_tokens=PROMPT_WORDS,
        path_tokens=path,
        step_tokens=step_mean,
        choices=K,
        inflight=setting.inflight,
    )
    scorer_shape = search_tree_shape(
        prompt_tokens=PROMPT_WORDS,
        path_tokens=path * (1 + sum(ANALYSIS) / sum(STEP)),
        step_tokens=sum(ANALYSIS) / 2,
        choices=K,
        inflight=setting.inflight,
    )
    if policy is scorer:  # one engine carries both roles' sequences and contexts
        shared = TreeShape(
            seqs_per_tree=policy_shape.seqs_per_tree + scorer_shape.seqs_per_tree,
            context_tokens=policy_shape.context_tokens + scorer_shape.context_tokens,
        )
        return trees_in_flight([(policy.capacity(), shared)], cap=setting.trees)
    return trees_in_flight(
        [(policy.capacity(), policy_shape), (scorer.capacity(), scorer_shape)],
        cap=setting.trees,
    )


def _snapshot(engines: tuple[LoadModelEngine, ...]) -> list[dict[str, Any]]:
    return [dict(e.stats()) for e in engines]


class TreeStream:
    """The tree slots: each search that ends makes room for a new problem, and a new
    tree starts only while fewer than `target` are in flight (continuing trees never
    wait)."""

    def __init__(
        self, target: int, config: SearchConfig, policy: EnginePolicy, scorer: GenPRMScorer
    ) -> None:
        self.target = target
        self.active: set[asyncio.Future[Any]] = set()
        self.finished = 0  # searches that ran to their end
        self.seen: list[int] = []  # trees in flight, sampled over the window
        self._stopping = False
        self._counter = itertools.count()
        self._search = (config, policy, scorer)

    def admit(self) -> None:
        config, policy, scorer = self._search
        while not self._stopping and len(self.active) < self.target:
            i = next(self._counter)
            task = asyncio.ensure_future(
                run_search(_problem(i), config, policy, scorer, BUDGET, seed=i)
            )
            self.active.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Future[Any]) -> None:
        self.active.discard(task)
        if not task.cancelled():
            self.finished += 1
        self.admit()

    async def steer(
        self,
        controller: AdmissionController | None,
        engines: tuple[LoadModelEngine, ...],
        interval: float,
        time_scale: float,
    ) -> None:
        """Admission on: every interval, the engine's batch and hit rate set the target."""
        last = _snapshot(engines)
        while controller is not None:
            await asyncio.sleep(interval * time_scale)
            now = _snapshot(engines)
            prompt = sum(
                a["prompt_tokens"] - b["prompt_tokens"] for a, b in zip(now, last, strict=True)
            )
            cached = sum(
                a["cached_prompt_tokens"] - b["cached_prompt_tokens"]
                for a, b in zip(now, last, strict=True)
            )
            last = now
            self.target = controller.update(
                running=sum(int(a["running"]) for a in now),
                waiting=sum(int(a["waiting"]) for a in now),
                max_seqs=sum(int(a["max_seqs"]) for a in now),
                hit_rate=cached / prompt if prompt else None,
            )
            self.admit()

    async def sample(self, every: float, time_scale: float) -> None:
        while True:
            await asyncio.sleep(every * time_scale)
            self.seen.append(len(self.active))

    async def stop(self, steering: asyncio.Future[Any]) -> None:
        self._stopping = True
        steering.cancel()
        for task in list(self.active):
            task.cancel()
        await asyncio.gather(*self.active, steering, return_exceptions=True)


@dataclass
class _Window:
    """The engines' counters at the start and end of the measured window."""

    before: list[dict[str, Any]]
    after: list[dict[str, Any]]
    seconds: float  # simulated seconds that really passed
    cpu_s: float  # this process's CPU seconds over it
    trees_done: int

    def delta(self, key: str) -> float:
        return float(sum(a[key] - b[key] for a, b in zip(self.after, self.before, strict=True)))


async def _run(
    setting: Setting, time_scale: float, warm_s: float, window_s: float, curve: EngineCurve
) -> dict[str, Any]:
    policy_engine, scorer_engine = _engines(time_scale, setting.shared, curve)
    policy = EnginePolicy(policy_engine)
    scorer = GenPRMScorer(scorer_engine, GenPRMSettings(max_analysis_tokens=ANALYSIS[1]))
    config = parse_search_config(
        {
            "algorithm": "bg_mcts",
            "k": K,
            "step_max_tokens": STEP[1],
            "max_inflight_expansions": setting.inflight,
        }
    )
    start = admitted_trees(setting, policy_engine, scorer_engine)
    controller = AdmissionController(start, setting.trees) if setting.admission else None
    engines = tuple({id(e): e for e in (policy_engine, scorer_engine)}.values())
    stream = TreeStream(start, config, policy, scorer)
    stream.admit()
    steering = asyncio.ensure_future(stream.steer(controller, engines, 10.0, time_scale))
    try:
        await asyncio.sleep(warm_s * time_scale)
        sampler = asyncio.ensure_future(stream.sample(5.0, time_scale))
        before = _snapshot(engines)
        done_before = stream.finished
        loop = asyncio.get_running_loop()
        sim0, cpu0 = loop.time(), _cpu()
        await asyncio.sleep(window_s * time_scale)
        after = _snapshot(engines)
        sim, cpu = loop.time() - sim0, _cpu() - cpu0
        sampler.cancel()
    finally:
        await stream.stop(steering)
    window = _Window(before, after, sim / time_scale, cpu, stream.finished - done_before)
    trees = round(sum(stream.seen) / max(len(stream.seen), 1))
    return _result(setting, trees, start, window, curve)


def _result(
    setting: Setting,
    trees: int,
    start: int,
    window: _Window,
    curve: EngineCurve,
) -> dict[str, Any]:
    """One setting's row from its window (see the module's docstring for each figure)."""
    after, before, seconds = window.after, window.before, window.seconds
    ceiling = sum(a["decode_tokens_per_s"] for a in after)
    decode = window.delta("decode_tokens")
    prompt = window.delta("prompt_tokens")
    # With a context cost no batch reaches the empty-context ceiling; a full batch at
    # the context these sequences really held is the best this workload could get.
    context = window.delta("context_tokens") / max(decode, 1)
    ceiling_at_context = len(after) * curve.ceiling_at(context)  # one snapshot per engine
    return {
        "trees": trees,
        "trees_start": start,
        "inflight": setting.inflight,
        "admission": setting.admission,
        "decode_util": [
            (a["decode_tokens"] - b["decode_tokens"]) / (seconds * a["decode_tokens_per_s"])
            for a, b in zip(after, before, strict=True)
        ],
        "hit": window.delta("cached_prompt_tokens") / max(prompt, 1),
        "prefill_per_decode": window.delta("prefill_tokens") / max(decode, 1),
        "goodput": decode / seconds / ceiling,
        "context": context,
        "goodput_at_context": decode / seconds / ceiling_at_context,
        "engine_util": window.delta("work_s") / (len(after) * seconds),
        "evicted_per_decode": window.delta("evicted_tokens") / max(decode, 1),
        "max_running": [int(a["max_running"]) for a in after],
        "trees_done": window.trees_done,
        "our_cpu": window.cpu_s / seconds,  # CPU s per simulated engine second
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


T = TypeVar("T")


class _JumpingSelector(selectors.SelectSelector):
    """Never sleeps: a wait for the next timer moves the loop's clock to it instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events and timeout:
            self.now += timeout
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time: when nothing is ready it jumps to the next timer.

    The engines' timing (`asyncio` timers) is then exact whatever else runs on the
    machine (this 2-core machine is shared: a wall-clock simulation would measure the
    other users), and the run takes only the CPU the simulation needs.  Our CPU is then
    reported per simulated second: CPU seconds this process spent per second of engine
    time (below 1: one core keeps up with the two engines in real time).
    """

    def __init__(self) -> None:
        self._selector_clock = _JumpingSelector()
        super().__init__(self._selector_clock)

    def time(self) -> float:
        return self._selector_clock.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """`main` run to its end on a fresh `VirtualClockLoop`, which is then closed: the tasks
    it leaves (the engines' or batcher's loops, idle by now) are cancelled first."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        rest = asyncio.all_tasks(loop)
        for task in rest:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()


def run_setting(
    setting: Setting, warm_s: float, window_s: float, curve: EngineCurve = H100
) -> dict[str, Any]:
    return run_virtual(_run(setting, 1.0, warm_s, window_s, curve))


def row(r: dict[str, Any]) -> str:
    limited = " (slower than real time)" if r["our_cpu"] >= 1.0 else ""
    trees = f"{r['trees']} (start {r['trees_start']})" if r["admission"] else str(r["trees"])
    return (
        f"| {'on' if r['admission'] else 'off'} | {trees} | {r['inflight']} "
        f"| {'/'.join(f'{u:.2f}' for u in r['decode_util'])} | {r['hit']:.0%} "
        f"| {r['prefill_per_decode']:.2f} "
        f"| {r['goodput']:.2f} | {r['context']:,.0f} | {r['goodput_at_context']:.2f} "
        f"| {r['engine_util']:.2f} | {r['evicted_per_decode']:.2f} "
        f"| {'/'.join(map(str, r['max_running']))} | {r['trees_done']} "
        f"| {r['our_cpu']:.2f}{limited} |"
    )


HEADER = (
    "| admission | trees in flight | in-flight expansions/tree | decode util p/s | prefix hit "
    "| prefill/decode token | goodput | mean context | goodput at that context "
    "| engine util | evicted/decode token "
    "| max running p/s | trees done | our CPU |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
)
