"""Microseconds per BG-MCTS select + backprop step: O(1) aggregates vs. subtree walks.

Run from the repository root::

    .venv/bin/python -m benchmarks.select_backprop          # full run (< ~2 min)
    .venv/bin/python -m benchmarks.select_backprop --quick  # smoke run (seconds)

FAST is the library: `PuctSearch.propose` (BG-PUCT Eq. 3 with the completion
bias of Eq. 4 and the generative child of Eqs. 5-6) reading the per-node
aggregates m, W, D of `search.tree.Tree`, then `Tree.add_child`, which
backpropagates them along the path to the root (O(depth)).

NAIVE is the test oracle of `tests/search/naive_bg_mcts.py`: no aggregates, as in
the paper's reference implementation; at every node on the selection path it
recomputes m_s and W~(s, rho) of each child s by walking the whole subtree of s,
so its "backprop" is just appending the node.

Method (also printed with the results):

* A tree of N nodes is grown by BG-MCTS itself (`make_algorithm(BGMCTSConfig())`)
  with seeded random Q in [0, 1], 10% of the new nodes answered ("1"), and rho
  annealed from 1.0 to the timing value (0.5) as the tree grows, as in a
  search that has spent half its budget.
* One timed step = one `propose` + the `add_child` calls of the expansion it
  returns (k = 2 children at a leaf, 1 when the generative child widens).
* Steps are timed on a growing tree kept between N and 1.1 N nodes: the tree
  is restored from a pickled snapshot of the N-node tree (untimed) whenever it
  would outgrow 1.1 N, and each restore continues with fresh random draws, so
  the steps follow many different selection paths.
* NAIVE runs the same windows with the same random draws; every one of its
  decisions is compared (outside the timed region) with FAST's, so the
  timings are for identical work.  The cyclic garbage collector is off
  while timing (as in `timeit`); NAIVE's repetitions are capped.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import pickle
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from search.algorithms import make_algorithm
from search.algorithms.puct import PuctSearch, PuctSettings
from search.budget import Budget
from search.config import BGMCTSConfig
from search.protocols import FinishReason
from search.tree import Tree
from tests.search.naive_bg_mcts import Choice, NaiveTree, naive_select

BUDGET_TOTAL = 1_000_000.0
ANSWER_PROBABILITY = 0.1
TIMING_RHO = 0.5
GROWTH = 0.1  # timed steps run on trees of N .. (1 + GROWTH) N nodes
SIZES: tuple[int, ...] = (100, 1_000, 10_000)

# (Q, answered) of one child to be added.
Draw = tuple[float, bool]


# ---------------------------------------------------------------------- shared
def make_fast() -> PuctSearch:
    algorithm = make_algorithm(BGMCTSConfig())
    assert isinstance(algorithm, PuctSearch)
    return algorithm


def make_budget(rho: float) -> Budget:
    budget = Budget(total=BUDGET_TOTAL)
    set_rho(budget, rho)
    return budget


def set_rho(budget: Budget, rho: float) -> None:
    budget.used = (1.0 - rho) * budget.total


def draw_children(rng: random.Random, count: int) -> list[Draw]:
    return [(rng.random(), rng.random() < ANSWER_PROBABILITY) for _ in range(count)]


def add_fast(tree: Tree, parent_id: int, draw: Draw) -> None:
    q, answered = draw
    tree.add_child(
        tree[parent_id],
        text="",
        q=q,
        answered=answered,
        answer="1" if answered else None,
        finish=FinishReason.EOS if answered else FinishReason.STOP_STRING,
        output_tokens=1,
    )


def fast_choice(algorithm: PuctSearch, tree: Tree, budget: Budget) -> Choice:
    (expansion,) = algorithm.propose(tree, budget)
    return (expansion.node_id, expansion.n, expansion.from_generative)


def build_tree(size: int, seed: int, rho_final: float = TIMING_RHO) -> Tree:
    """Grow a tree of exactly `size` nodes with BG-MCTS, rho annealed 1 -> rho_final."""
    rng = random.Random(seed)
    tree = Tree("benchmark problem")
    algorithm = make_fast()
    budget = make_budget(1.0)
    while len(tree) < size:
        set_rho(budget, 1.0 - (1.0 - rho_final) * len(tree) / size)
        node_id, n, _ = fast_choice(algorithm, tree, budget)
        for draw in draw_children(rng, min(n, size - len(tree))):
            add_fast(tree, node_id, draw)
    return tree


def lockstep_trace(
    size: int, seed: int, rho_final: float = TIMING_RHO
) -> list[tuple[Choice, Choice]]:
    """(FAST, NAIVE) decision of every step while growing a `size`-node tree.

    Both trees receive FAST's expansion with the same random children, so they
    stay identical and every pair should match.
    """
    rng = random.Random(seed)
    tree = Tree("benchmark problem")
    naive = NaiveTree()
    algorithm = make_fast()
    budget = make_budget(1.0)
    trace: list[tuple[Choice, Choice]] = []
    while len(tree) < size:
        set_rho(budget, 1.0 - (1.0 - rho_final) * len(tree) / size)
        fast = fast_choice(algorithm, tree, budget)
        trace.append((fast, naive_select(naive, algorithm.s, budget.rho)))
        node_id, n, _ = fast
        for draw in draw_children(rng, min(n, size - len(tree))):
            add_fast(tree, node_id, draw)
            naive.add_child(node_id, *draw)
    return trace


# ---------------------------------------------------------------------- timing
@dataclass(slots=True)
class Run:
    times_us: list[float]
    choices: list[list[Choice]]  # per window
    depths: list[int]  # depth of the node each step expanded
    children_added: int


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Collect once, then keep the cyclic GC off (as `timeit` does).

    Restored trees are freed by reference counting (nodes hold ids, not
    references), so nothing piles up while the collector is off.
    """
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _window_draws(seed: int, size: int, window: int) -> list[Draw]:
    rng = random.Random(f"{seed}/{size}/{window}")
    return draw_children(rng, math.ceil(GROWTH * size) + 2)


def time_fast(snapshot: bytes, size: int, reps: int, seed: int) -> Run:
    """Time `reps` steps on trees of `size` .. (1 + GROWTH) `size` nodes."""
    limit = max(size + 2, math.ceil((1.0 + GROWTH) * size))
    budget = make_budget(TIMING_RHO)
    run = Run([], [], [], 0)
    perf = time.perf_counter
    window = 0
    with gc_paused():
        while len(run.times_us) < reps:
            tree: Tree = pickle.loads(snapshot)
            algorithm = make_fast()
            draws = _window_draws(seed, size, window)
            pos = 0
            choices: list[Choice] = []
            while len(tree) + 2 <= limit and len(run.times_us) < reps:
                t0 = perf()
                expansions = algorithm.propose(tree, budget)
                for expansion in expansions:
                    # add_fast's add_child written out: the timed step pays only the
                    # calls a driver makes, no helper call per child.
                    parent = tree[expansion.node_id]
                    for _ in range(expansion.n):
                        q, answered = draws[pos]
                        pos += 1
                        tree.add_child(
                            parent,
                            text="",
                            q=q,
                            answered=answered,
                            answer="1" if answered else None,
                            finish=FinishReason.EOS if answered else FinishReason.STOP_STRING,
                            output_tokens=1,
                        )
                t1 = perf()
                run.times_us.append((t1 - t0) * 1e6)
                (done,) = expansions
                choices.append((done.node_id, done.n, done.from_generative))
                run.depths.append(tree[done.node_id].depth)
            run.children_added += pos
            run.choices.append(choices)
            window += 1
    return run


def time_naive(
    snapshot: bytes,
    size: int,
    reps: int,
    seed: int,
    settings: PuctSettings,
    max_seconds: float = math.inf,
    min_reps: int = 10,
) -> Run:
    """Like `time_fast`, stopping early once `max_seconds` of timed steps (and `min_reps`) ran."""
    limit = max(size + 2, math.ceil((1.0 + GROWTH) * size))
    run = Run([], [], [], 0)
    perf = time.perf_counter
    window = 0
    spent_us = 0.0
    max_us = max_seconds * 1e6
    with gc_paused():
        while len(run.times_us) < reps:
            tree = NaiveTree.from_tree(pickle.loads(snapshot))
            draws = _window_draws(seed, size, window)
            pos = 0
            choices: list[Choice] = []
            while len(tree) + 2 <= limit and len(run.times_us) < reps:
                if spent_us > max_us and len(run.times_us) >= min_reps:
                    reps = len(run.times_us)
                    break
                t0 = perf()
                choice = naive_select(tree, settings, TIMING_RHO)
                node_id, n, _ = choice
                for _ in range(n):
                    q, answered = draws[pos]
                    pos += 1
                    tree.add_child(node_id, q, answered)
                t1 = perf()
                run.times_us.append((t1 - t0) * 1e6)
                spent_us += run.times_us[-1]
                choices.append(choice)
                run.depths.append(tree.nodes[node_id].depth)
            run.children_added += pos
            run.choices.append(choices)
            window += 1
    return run


def compare_runs(fast: Run, naive: Run) -> int:
    """Assert NAIVE decided like FAST on every step both ran; return the count."""
    checked = 0
    for window, (f, n) in enumerate(zip(fast.choices, naive.choices, strict=False)):
        for step, (fc, nc) in enumerate(zip(f, n, strict=False)):
            if fc != nc:
                raise AssertionError(f"window {window} step {step}: fast {fc} != naive {nc}")
            checked += 1
    return checked


# ---------------------------------------------------------------------- report
def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolation percentile (numpy's default)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(slots=True)
class Row:
    size: int
    fast: Run
    naive: Run
    checked: int
    max_depth: int
    answered: int
    d_ans: float
    root_children: int


def cpu_description() -> str:
    total = os.cpu_count()
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        usable = None
    return f"{total} logical CPUs" + (
        "" if usable is None else f", {usable} usable by this process"
    )


def _table(header: str, cells: Iterable[str]) -> str:
    """A right-aligned markdown table: the header row, its rule, then the rows."""
    columns = header.count("|") - 1
    return "\n".join([header, "|" + "---:|" * columns, *cells])


def markdown_table(rows: Sequence[Row]) -> str:
    cells = []
    for row in rows:
        fm = statistics.median(row.fast.times_us)
        nm = statistics.median(row.naive.times_us)
        cells.append(
            f"| {row.size:,} | {fm:,.1f} | {percentile(row.fast.times_us, 0.9):,.1f} "
            f"| {len(row.fast.times_us):,} | {nm:,.1f} "
            f"| {percentile(row.naive.times_us, 0.9):,.1f} | {len(row.naive.times_us):,} "
            f"| {nm / fm:,.1f}x |"
        )
    return _table(
        "| nodes | fast median µs | fast p90 µs | fast reps "
        "| naive median µs | naive p90 µs | naive reps | speedup (median) |",
        cells,
    )


def shape_table(rows: Sequence[Row]) -> str:
    cells = []
    for row in rows:
        per_step = row.fast.children_added / len(row.fast.times_us)
        cells.append(
            f"| {row.size:,} | {row.max_depth} | {statistics.fmean(row.fast.depths):.1f} "
            f"| {row.root_children} | {row.answered:,} "
            f"| {row.d_ans:.2f} | {per_step:.2f} | {row.checked:,} |"
        )
    return _table(
        "| nodes | max depth | mean depth expanded | root children | answered nodes | d_ans "
        "| children/step | steps cross-checked |",
        cells,
    )


def cross_check(seed: int) -> list[tuple[Choice, Choice]]:
    """Grow trees in lock-step through three rho schedules and fail on the first
    differing selection: annealed to 0.5 and 0.0 (completion bias, exploration
    annealing) and kept at 1.0 (where the generative child widens more often)."""
    lockstep: list[tuple[Choice, Choice]] = []
    for rho_final in (0.5, 0.0, 1.0):
        trace = lockstep_trace(300, seed + 5, rho_final)
        mismatches = [(i, f, n) for i, (f, n) in enumerate(trace) if f != n]
        if mismatches:
            raise AssertionError(f"rho_final={rho_final}: selections differ: {mismatches[:5]}")
        lockstep.extend(trace)
    return lockstep


def time_sizes(seed: int, quick: bool, naive_seconds: float) -> list[Row]:
    """Time both versions at every size in SIZES (progress on stderr)."""
    fast_reps = 500 if quick else 5_000
    # NAIVE costs O(N) per step; cap its repetitions and its timed seconds per
    # size so that the whole run stays under ~2 minutes.
    naive_caps = (
        {100: 300, 1_000: 100, 10_000: 20} if quick else {100: 5_000, 1_000: 1_500, 10_000: 200}
    )
    settings = make_fast().s
    rows: list[Row] = []
    for size in SIZES:
        print(f"timing {size:,} nodes ...", file=sys.stderr, flush=True)
        tree = build_tree(size, seed)
        snapshot = pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL)
        fast = time_fast(snapshot, size, fast_reps, seed)
        naive = time_naive(
            snapshot,
            size,
            min(fast_reps, naive_caps.get(size, 20)),
            seed,
            settings,
            max_seconds=naive_seconds,
        )
        rows.append(
            Row(
                size=size,
                fast=fast,
                naive=naive,
                checked=compare_runs(fast, naive),
                max_depth=tree.max_depth,
                answered=len(tree.answered_ids),
                d_ans=tree.d_ans,
                root_children=len(tree.root.children),
            )
        )
    return rows


def print_report(
    args: argparse.Namespace,
    rows: Sequence[Row],
    lockstep: Sequence[tuple[Choice, Choice]],
    naive_seconds: float,
    elapsed: float,
) -> None:
    config = BGMCTSConfig()
    print("# BG-MCTS select + backprop: per-node aggregates vs. subtree walks")
    print()
    print(
        f"- Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, {cpu_description()}"
    )
    print(
        f"- BGMCTSConfig defaults: k={config.k}, c={config.c:.4f}, kappa={config.kappa}, "
        f"lambda={config.lam}; timed at rho={TIMING_RHO}; seed={args.seed}"
        f"{'; --quick' if args.quick else ''}"
    )
    print(
        "- Trees grown by BG-MCTS itself with random Q ~ U[0, 1], "
        f"{ANSWER_PROBABILITY:.0%} of nodes answered, rho annealed 1.0 -> {TIMING_RHO}."
    )
    print(
        "- One step = one `propose` (selection) + the `add_child` calls of its expansion "
        "(k children at a leaf, 1 on widening); fast backprop is O(depth), naive keeps no "
        "aggregates and walks every child's subtree at each level of the selection path."
    )
    print(
        f"- Steps run on a growing tree of N to {1 + GROWTH:.1f} N nodes, restored from a "
        "snapshot of the N-node tree (untimed) before it outgrows that; both versions use "
        "the same random children and every naive decision was asserted equal to fast's."
    )
    print(
        "- time.perf_counter around each step; cyclic GC off while timing (as in timeit); "
        f"naive repetitions capped (and at most {naive_seconds:g} s of naive steps per size)."
    )
    print()
    print(markdown_table(rows))
    print()
    print(shape_table(rows))
    print()
    print(
        "Fast is O(depth x branching) per step: it grows with the selection depth, which "
        "BG-MCTS's late deepening makes grow with N.  Naive also walks every subtree on "
        "the path, O(N)-O(N x depth)."
    )
    widenings = sum(1 for fast, _ in lockstep if fast[2])
    print(
        "Lock-step cross-check while growing 300-node trees (rho annealed to 0.5, 0.0; "
        f"kept at 1.0): {len(lockstep)} selections agree, {widenings} of them widenings."
    )
    print(f"Total wall time: {elapsed:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    naive_seconds = 3.0 if args.quick else 25.0
    started = time.perf_counter()
    lockstep = cross_check(args.seed)
    rows = time_sizes(args.seed, args.quick, naive_seconds)
    elapsed = time.perf_counter() - started
    print_report(args, rows, lockstep, naive_seconds, elapsed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
