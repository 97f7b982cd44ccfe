"""The search core's fast paths decide exactly as the plain definitions do.

* `Tree` caches path segments and sibling priors; they must equal a fresh
  computation after every growth, and pickles carry no caches.
* The driver awaits calls to a service that never suspends one by one, in
  place (`search.driver._Calls`); once a call suspends, calls overlap again.
  Results keep their order, each call runs in one task, and errors and
  cancellation surface as with `asyncio.gather`.
* `PuctSearch.propose` inlines Eqs. 3-6; it must pick what `child_scores` and
  `generative_score` pick.
* AB-MCTS-A draws from the search's own RandomState: the same numbers the
  global RandomState gives in that state.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import random

import numpy as np
import pytest

from search import parse_search_config, run_search
from search.algorithms import make_algorithm
from search.algorithms.puct import PuctSearch
from search.budget import Budget
from search.driver import _Calls
from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest
from search.scripted import ScriptedPolicy, ScriptedScorer
from search.tree import Node, Tree


def _random_tree(seed: int, size: int) -> Tree:
    rng = random.Random(seed)
    tree = Tree("p")
    while len(tree) < size:
        parent = tree[rng.randrange(len(tree))]
        failed = rng.random() < 0.1
        tree.add_child(
            parent,
            text=f" t{len(tree)}",
            q=rng.random(),
            answered=rng.random() < 0.2,
            answer="1",
            finish=FinishReason.ERROR if failed else FinishReason.STOP_STRING,
            output_tokens=1,
            inserted_text=rng.choice(["", "\nStep"]),
            error="failed" if failed else None,
        )
        # read the caches in between, so that later growth must invalidate them
        probe = tree[rng.randrange(len(tree))]
        tree.path_segments(probe)
        tree.priors(probe)
    return tree


def _plain_priors(tree: Tree, node: Node) -> list[float]:
    qs = [tree[i].q for i in node.children]
    if not qs:
        return []
    top = max(qs)
    exps = [math.exp(q - top) for q in qs]
    total = sum(exps)
    return [e / total for e in exps]


def test_tree_caches_match_fresh_computation_and_are_not_pickled() -> None:
    tree = _random_tree(0, 300)
    for node in tree:
        assert tree.path_segments(node) == tuple(n.segment for n in tree.path(node))
        assert tree.assistant_text(node) == "Step 1:" + "".join(n.segment for n in tree.path(node))
        assert tree.priors(node) == _plain_priors(tree, node)
        pairs = [(tree[i], p) for i, p in zip(node.children, tree.priors(node), strict=True)]
        assert tree.selectable_children(node) == [(c, p) for c, p in pairs if c.expandable]
    clone = pickle.loads(pickle.dumps(tree))
    assert "_segments" not in tree.__getstate__() and "_selection" not in tree.__getstate__()
    assert clone.rows() == tree.rows()
    assert all(clone.priors(c) == tree.priors(n) for c, n in zip(clone, tree, strict=True))
    leaf = clone.add_child(
        clone.root,
        text=" new",
        q=0.5,
        answered=False,
        answer=None,
        finish=FinishReason.EOS,
        output_tokens=1,
    )
    assert clone.path_segments(leaf) == (" new",)
    assert len(clone.priors(clone.root)) == len(tree.root.children) + 1


def test_propose_picks_what_the_formulas_pick() -> None:
    tree = _random_tree(1, 400)
    for rho in (1.0, 0.7, 0.3, 0.0):
        for config in ({"algorithm": "bg_mcts"}, {"algorithm": "mcts"}):
            algorithm = make_algorithm(parse_search_config(config))
            assert isinstance(algorithm, PuctSearch)
            budget = Budget(total=100.0, used=(1.0 - rho) * 100.0)
            (expansion,) = algorithm.propose(tree, budget)
            # the same walk with the reference methods
            node = tree.root
            while True:
                if not node.children:
                    expected = (node.id, algorithm.s.k, False)
                    break
                scored = algorithm.child_scores(tree, node, budget.rho)
                best = max(scored, key=lambda x: x[1], default=None)
                if algorithm.s.generative_node and (
                    best is None or algorithm.generative_score(tree, node, budget.rho) >= best[1]
                ):
                    expected = (node.id, 1, True)
                    break
                assert best is not None
                node = best[0]
            assert (expansion.node_id, expansion.n, expansion.from_generative) == expected


async def test_calls_to_a_synchronous_service_run_inline_in_order() -> None:
    calls = _Calls()
    seen: list[int] = []

    async def now(i: int) -> int:
        seen.append(i)
        return i * i

    tasks_before = len(asyncio.all_tasks())
    assert await calls.gather([now(i) for i in range(5)]) == [0, 1, 4, 9, 16]
    assert await calls.gather([now(7)]) == [49]
    assert await calls.gather([]) == []
    assert len(asyncio.all_tasks()) == tasks_before and calls.synchronous
    assert seen == [0, 1, 2, 3, 4, 7]


async def test_calls_to_a_suspending_service_overlap_each_in_one_task() -> None:
    calls = _Calls()
    in_flight = peak = 0
    order: list[int] = []
    same_task: list[bool] = []

    async def slow(i: int) -> int:
        nonlocal in_flight, peak
        task = asyncio.current_task()
        order.append(i)  # first steps run in the given order
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (4 - i % 4))
        in_flight -= 1
        same_task.append(asyncio.current_task() is task)  # what cancel scopes need
        return i

    async def maybe(i: int) -> int:
        return await slow(i) if i >= 2 else i

    assert await calls.gather([maybe(i) for i in range(5)]) == [0, 1, 2, 3, 4]
    assert not calls.synchronous and peak == 3 and order == [2, 3, 4]
    peak = 0
    assert await calls.gather([slow(i) for i in range(5, 9)]) == [5, 6, 7, 8]
    assert peak == 4 and order == [2, 3, 4, 5, 6, 7, 8]
    assert await calls.gather([slow(9)]) == [9]
    assert all(same_task) and len(same_task) == 8


async def test_calls_may_hold_task_bound_scopes_across_suspensions() -> None:
    """Cancel scopes and `asyncio.timeout` tie themselves to the task they were entered in."""
    anyio = pytest.importorskip("anyio")

    async def call(i: int) -> int:
        with anyio.fail_after(5):
            await asyncio.sleep(0.001 * (3 - i))
        async with asyncio.timeout(5):
            await asyncio.sleep(0.001)
        return i

    calls = _Calls()
    assert await calls.gather([call(i) for i in range(3)]) == [0, 1, 2]  # learns: suspends
    assert await calls.gather([call(i) for i in range(3)]) == [0, 1, 2]  # asyncio.gather


class Boom(RuntimeError):
    pass


async def test_call_errors_surface_like_asyncio_gather() -> None:
    started: list[int] = []

    async def fail_now(i: int) -> int:
        started.append(i)
        raise Boom(str(i))

    async def fail_later(i: int) -> int:
        started.append(i)
        await asyncio.sleep(0)
        raise Boom(str(i))

    async def fine(i: int) -> int:
        started.append(i)
        await asyncio.sleep(0.001)
        return i

    async def quick(i: int) -> int:
        started.append(i)
        return i

    with pytest.raises(Boom, match="1"):
        await _Calls().gather([quick(0), fail_now(1), quick(2)])
    assert started == [0, 1]  # the search fails: the calls left are closed, never started
    started.clear()
    with pytest.raises(Boom, match="1"):
        await _Calls().gather([fail_later(1), fine(2), fail_later(3)])
    assert started == [1, 2, 3]
    await asyncio.sleep(0.01)  # the calls left running finish without noise


async def test_cancelling_the_search_cancels_its_calls() -> None:
    cancelled: list[int] = []

    async def hang(i: int) -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise
        return 0

    outer = asyncio.ensure_future(_Calls().gather([hang(0), hang(1), hang(2)]))
    await asyncio.sleep(0.001)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    await asyncio.sleep(0)
    assert sorted(cancelled) == [0, 1, 2]


async def test_concurrent_searches_on_a_suspending_service_match_serial() -> None:
    class SlowPolicy(ScriptedPolicy):
        async def generate(self, request: GenerationRequest) -> list[Generation]:
            await asyncio.sleep(0)
            return await super().generate(request)

    class SlowScorer(ScriptedScorer):
        async def score(self, request: ScoreRequest) -> Score:
            await asyncio.sleep(0)
            return await super().score(request)

    config = parse_search_config({"algorithm": "beam", "width": 3, "branching": 3})
    serial = [
        await run_search("p", config, ScriptedPolicy(seed=s), ScriptedScorer(seed=s), 1200, s)
        for s in range(3)
    ]
    together = await asyncio.gather(
        *(
            run_search("p", config, SlowPolicy(seed=s), SlowScorer(seed=s), 1200, s)
            for s in range(3)
        )
    )
    for a, b in zip(serial, together, strict=True):
        assert a.tree.rows() == b.tree.rows()
        assert a.chosen_answer == b.chosen_answer and a.c_used == b.c_used


def test_ab_mcts_a_draws_are_the_global_random_states_draws() -> None:
    pytest.importorskip("treequest")
    from treequest.algos.ab_mcts_a.prob_state import PriorConfig, ProbabilisticDist

    from search.algorithms.ab_mcts import _RNG, _install_prob_state_seeding

    _install_prob_state_seeding()
    for dist_type in ("gaussian", "beta"):
        dist = ProbabilisticDist(PriorConfig(dist_type=dist_type))
        for obs in (0.2, 0.9, 0.5):
            dist.tell_observation(obs)
        np.random.seed(7)
        legacy = [float(dist.draw_sample()) for _ in range(25)]  # the global RandomState
        np.random.seed(123)
        token = _RNG.set(np.random.RandomState(7))
        try:
            private = [float(dist.draw_sample()) for _ in range(25)]
        finally:
            _RNG.reset(token)
        assert private == legacy
        assert np.random.random() == np.random.RandomState(123).random()  # global untouched
