"""The benchmark's sizes and its problem selections, fixed before anything is measured.

Every selection is generated (`pipeline.problems.arithmetic`) from its own seed, and
the held-out problems are chosen first, so no later choice can look at them:

* round 0 searches problems of one or two operations (seed 0: the embedded default's
  generator with ``max_steps: 2``).  One-step round 0 was measured first and left the
  round-0 checkpoint unable to write a second step (pass@1 0.01 on 2 and 3 operations):
  the search had nothing to find in round 1;
* the probe (seed 4) is where the round-1 policy's pass@1 and pass@k are measured per
  number of operations, to choose how many operations round 1 trains on;
* round 1 trains on multi-step problems (seed 2) of the chosen number of operations;
* the held-out problems (seed 3) have 2 or 3 operations, and no problem text in any
  other selection.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from pipeline.problems.arithmetic import generate, make_problem

Problem = dict[str, Any]
# the generator's seeds of each selection (round 0 uses the embedded default's seed 0)
ROUND0_SEED, ROUND1_SEED, HELDOUT_SEED, PROBE_SEED = 0, 2, 3, 4
# round 0's problems: what the pipeline's arithmetic source gives with this max_steps
ROUND0_MAX_STEPS = 2
# numbers of operations round 1 may train on, tried in this order
MULTI_STEP = (2, 3)


@dataclass(frozen=True)
class Mode:
    """How big each part of the benchmark is."""

    round0_problems: int
    probe_problems: int  # per number of operations
    round1_problems: int
    heldout: int
    seeds: int  # synthesis seeds per round-1 method
    sft_steps: int
    # seeds whose BG-MCTS trees also train a checkpoint on their rows without the
    # process gate (what the gate is worth); each costs a training and an evaluation
    gate_seeds: int = 1
    probe_samples: int = 4  # pass@k's k
    probe_temperature: float = 0.7  # the search's temperature
    round0_budget: int = 300  # configs/local.yaml's B, policy output tokens
    # policy output + PRM input + PRM output tokens per problem: about 12 tree nodes of
    # 20 policy and 100 PRM tokens, the end of B held back for the last scores' reserve
    round1_budget: int = 2000
    batch_size: int = 8
    learning_rate: float = 5e-5
    max_new_tokens: int = 96  # a three-step answer is about 60 tokens
    prm_epochs: int = 2


FULL = Mode(
    round0_problems=48,
    probe_problems=24,
    round1_problems=20,
    heldout=300,
    seeds=3,
    sft_steps=20,
)
# the full benchmark on fewer problems and one seed: every other setting is the full one's
QUICK = replace(
    FULL, round0_problems=16, probe_problems=16, round1_problems=16, heldout=100, seeds=1
)
# CI's real miniature: a couple of training steps, a handful of problems, shorter budgets
TINY = replace(
    QUICK,
    round0_problems=3,
    probe_problems=2,
    round1_problems=3,
    heldout=4,
    sft_steps=2,
    probe_samples=2,
    round0_budget=120,
    round1_budget=800,
    batch_size=2,
    max_new_tokens=48,
    prm_epochs=1,
)
MODES = {"quick": QUICK, "full": FULL, "tiny": TINY}


def hyper(mode: Mode) -> dict[str, Any]:
    """The training and generation settings the TRL half gets, the same for every
    checkpoint (`benchmarks.support.trl`)."""
    return {
        "steps": mode.sft_steps,
        "batch_size": mode.batch_size,
        "learning_rate": mode.learning_rate,
        "seed": 0,
        "max_length": 512,
        "eval_batch_size": 64,
        "max_new_tokens": mode.max_new_tokens,
    }


def _stream(seed: int, operations: Iterable[int], exclude: set[str]) -> Iterator[Problem]:
    """Problems of `seed` with one of `operations`, no text in `exclude`, in index order."""
    wanted = set(operations)
    index = 0
    while True:
        problem = make_problem(seed, index, max_steps=max(wanted))
        index += 1
        if problem["steps"] in wanted and problem["problem"] not in exclude:
            yield problem


def take(seed: int, operations: Iterable[int], count: int, exclude: set[str]) -> list[Problem]:
    """The first `count` problems of `seed` with one of `operations`, none in `exclude`."""
    stream = _stream(seed, operations, exclude)
    return [next(stream) for _ in range(count)]


@dataclass(frozen=True)
class Selections:
    heldout: list[Problem]
    round0: list[Problem]
    probe: dict[int, list[Problem]]  # operations -> problems

    def round1(self, operations: int, count: int) -> list[Problem]:
        """Round 1's train problems of `operations` operations: text-disjoint from the
        held-out problems, round 0 and the probe."""
        seen = {p["problem"] for p in self.heldout + self.round0}
        seen |= {p["problem"] for ps in self.probe.values() for p in ps}
        return take(ROUND1_SEED, [operations], count, seen)


def selections(mode: Mode) -> Selections:
    """Held-out first (2 and 3 operations), then round 0 and the probe, each disjoint
    from everything chosen before it."""
    round0 = generate(ROUND0_SEED, mode.round0_problems, max_steps=ROUND0_MAX_STEPS)
    seen = {p["problem"] for p in round0}
    heldout = take(HELDOUT_SEED, MULTI_STEP, mode.heldout, seen)
    seen |= {p["problem"] for p in heldout}
    probe: dict[int, list[Problem]] = {}
    for operations in MULTI_STEP:
        probe[operations] = take(PROBE_SEED, [operations], mode.probe_problems, seen)
        seen |= {p["problem"] for p in probe[operations]}
    return Selections(heldout=heldout, round0=round0, probe=probe)


def choose_operations(pass_at_1: dict[int, float], low: float = 0.1, high: float = 0.5) -> int:
    """The number of operations round 1 trains on: the first (fewest) whose pass@1 lies in
    [low, high]; else the one whose pass@1 is nearest that band (ties: fewer operations)."""
    for operations in sorted(pass_at_1):
        if low <= pass_at_1[operations] <= high:
            return operations
    return min(
        sorted(pass_at_1),
        key=lambda o: max(low - pass_at_1[o], pass_at_1[o] - high),
    )
