"""LiteSearch (paper App. C / App. I) and step-level beam search (App. H).

Two kinds of checks:

* hand-built trees (`Tree.add_child`) with chosen Q values, where every
  selection and every kept beam is worked out by hand in the docstring;
* whole searches through `search.driver.run_search` with `ScriptedPolicy` and
  `ScriptedScorer`.  The scripted policy is a fake LLM (and the scripted scorer
  a fake PRM): no model runs in unit tests, so they stand in for the engine
  and make every run deterministic.
"""

from __future__ import annotations

import pytest

from search.algorithms import make_algorithm
from search.algorithms.base import Expansion
from search.algorithms.beam import BeamSearch
from search.algorithms.litesearch import LiteSearch
from search.budget import Budget
from search.config import BeamConfig, LiteSearchConfig, NodeUnit
from search.driver import SearchResult, run_search
from search.formulas import litesearch_width
from search.protocols import FinishReason
from search.scripted import ScriptedPolicy, ScriptedScorer
from search.tree import ROOT_ID, Node, Tree

BUDGET = Budget(total=10_000)


def add(
    tree: Tree, parent: Node, q: float, *, answered: bool = False, error: str | None = None
) -> Node:
    """A child with a chosen Q; answered children carry the answer "5"."""
    return tree.add_child(
        parent,
        text=" the answer is \\boxed{5}" if answered else " step",
        q=q,
        answered=answered,
        answer="5" if answered else None,
        finish=FinishReason.EOS if answered else FinishReason.STOP_STRING,
        output_tokens=3,
        error=error,
    )


# --------------------------------------------------------------------- (a) the width rule
@pytest.mark.parametrize(
    ("value", "depth", "width"),
    [
        (0.0, 1, 10),  # 1 - 1^C = 0 never exceeds .9: the maximum
        (0.5, 1, 4),  # .5^3 = .125 (1-.125 = .875 <= .9), .5^4 = .0625 (.9375 > .9): C = 4
        (0.5, 2, 2),  # ceil(4 / 2) = 2
        (0.5, 3, 2),  # ceil(4 / 3) = 2
        (0.3, 1, 7),  # .7^6 = .1176 (.882), .7^7 = .0824 (.918 > .9): C = 7
        (0.3, 2, 4),  # ceil(7 / 2) = 4
        (0.3, 3, 3),  # ceil(7 / 3) = 3
        (0.1, 1, 10),  # .9^21 = .109, .9^22 = .0985: C = 22, clipped to 10
        (0.1, 3, 8),  # ceil(22 / 3) = 8
        (0.2, 2, 6),  # .8^10 = .107, .8^11 = .0859: C = 11; ceil(11 / 2) = 6
        (0.9, 1, 2),  # C = 1 gives exactly .9, not > .9: C = 2
        (0.95, 1, 1),  # .05^1 = .05 (.95 > .9): C = 1
        (0.95, 4, 1),  # ceil(1 / 4) = 1 (never below 1)
    ],
)
def test_width_rule_by_hand(value: float, depth: int, width: int) -> None:
    """b(x) = clip(ceil(C / depth), 1, 10), C the smallest with 1 - (1 - v)^C > .9 (App. C)."""
    assert litesearch_width(value, depth, 0.9, 10) == width


def test_litesearch_width_of_nodes() -> None:
    """The root counts as v = 0, depth 1 (width 10); others use Q and their own depth."""
    algo = LiteSearch(LiteSearchConfig())
    tree = Tree("p")
    a = add(tree, tree.root, 0.5)
    a1 = add(tree, a, 0.3)
    assert [algo.width(n) for n in (tree.root, a, a1)] == [10, 4, 4]
    assert algo.room(a) == 3 and algo.room(tree.root) == 9


# ------------------------------------------------------------- (b) LiteSearch selection
def lite_tree() -> Tree:
    """root -> a (.95) -> a1 (.2);  root -> b (.5);  root -> c (.3).

    Widths: root 10 (room 7); a: C = 1 -> 1, full with a1; b: 4 (room 4);
    c: 7 (room 7); a1 (depth 2): C = 11 -> ceil(11/2) = 6.
    Highest value with room: b (.5) - a (.95) is higher but full.
    """
    tree = Tree("p")
    a = add(tree, tree.root, 0.95)
    add(tree, tree.root, 0.5)
    add(tree, tree.root, 0.3)
    add(tree, a, 0.2)
    return tree


def test_first_step_expands_the_root() -> None:
    """A fresh tree: the root (v = 0, max width) is the only candidate."""
    tree = Tree("p")
    incremental = LiteSearch(LiteSearchConfig(mode="incremental"))
    batch = LiteSearch(LiteSearchConfig(mode="batch"))
    assert incremental.propose(tree, BUDGET) == [Expansion(ROOT_ID, 1, NodeUnit.SEQUENTIAL)]
    assert batch.propose(tree, BUDGET) == [Expansion(ROOT_ID, 10, NodeUnit.SEQUENTIAL)]
    assert (incremental.name, batch.name) == ("litesearch_incremental", "litesearch_batch")


def test_selects_highest_value_with_room() -> None:
    """See `lite_tree`: b is chosen; incremental asks n=1, batch its whole room 4."""
    tree = lite_tree()
    b = tree[2]
    incremental = LiteSearch(LiteSearchConfig(mode="incremental"))
    assert incremental.propose(tree, BUDGET) == [Expansion(b.id, 1, NodeUnit.SEQUENTIAL)]
    batch = LiteSearch(LiteSearchConfig(mode="batch"))
    assert batch.propose(tree, BUDGET) == [Expansion(b.id, 4, NodeUnit.SEQUENTIAL)]

    # Three low children of b: b still leads (.5) with one unit of room left.
    children = [add(tree, b, 0.1) for _ in range(3)]
    batch.observe(tree, Expansion(b.id, 4, NodeUnit.SEQUENTIAL), children)
    assert batch.propose(tree, BUDGET) == [Expansion(b.id, 1, NodeUnit.SEQUENTIAL)]
    # b full: the next best is c (.3, room 7).
    add(tree, b, 0.1)
    assert batch.propose(tree, BUDGET) == [Expansion(3, 7, NodeUnit.SEQUENTIAL)]


def test_incremental_reselects_until_room_is_used() -> None:
    """Incremental mode re-selects each step; b (room 4) is chosen 4 times, then c."""
    tree = lite_tree()
    algo = LiteSearch(LiteSearchConfig(mode="incremental"))
    chosen = []
    for _ in range(5):
        (expansion,) = algo.propose(tree, BUDGET)
        assert expansion.n == 1
        chosen.append(expansion.node_id)
        child = add(tree, tree[expansion.node_id], 0.05)
        algo.observe(tree, expansion, [child])
    assert chosen == [2, 2, 2, 2, 3]


def test_new_better_child_takes_over() -> None:
    """A child with a higher value than every candidate is selected next."""
    tree = lite_tree()
    algo = LiteSearch(LiteSearchConfig(mode="incremental"))
    (expansion,) = algo.propose(tree, BUDGET)
    child = add(tree, tree[expansion.node_id], 0.8)  # depth 2: C = 2 -> width 1
    algo.observe(tree, expansion, [child])
    assert algo.propose(tree, BUDGET)[0].node_id == child.id


def test_ties_go_to_the_lowest_id() -> None:
    tree = Tree("p")
    first = add(tree, tree.root, 0.6)
    add(tree, tree.root, 0.6)
    algo = LiteSearch(LiteSearchConfig())
    assert algo.propose(tree, BUDGET)[0].node_id == first.id


def test_failed_and_answered_nodes() -> None:
    """Failed nodes are never selected; answered ones only with expand_answered (default)."""
    tree = Tree("p")
    add(tree, tree.root, 0.0, error="scripted failure")
    answered = add(tree, tree.root, 0.7, answered=True)
    plain = add(tree, tree.root, 0.4)
    config = LiteSearchConfig(early_stop=False)
    assert LiteSearch(config).propose(tree, BUDGET)[0].node_id == answered.id
    terminal = LiteSearch(config, expand_answered=False)
    assert terminal.propose(tree, BUDGET)[0].node_id == plain.id


def test_no_room_ends_the_search() -> None:
    """max_width = 1: the root has its one child, which failed - nothing is left."""
    tree = Tree("p")
    add(tree, tree.root, 0.0, error="scripted failure")
    assert LiteSearch(LiteSearchConfig(max_width=1)).propose(tree, BUDGET) == []


def test_heap_is_lazy_and_not_rescanned() -> None:
    """Each node is pushed once; full nodes are popped only when they reach the top."""
    tree = lite_tree()
    algo = LiteSearch(LiteSearchConfig())
    algo.propose(tree, BUDGET)
    assert algo.heap_size == 4  # root, b, c, a1 remain; a (full) was popped at the top
    for _ in range(3):
        algo.propose(tree, BUDGET)
    assert algo.heap_size == 4  # no new nodes, no new entries


# ----------------------------------------------------------------- (c) early stop
@pytest.mark.parametrize(
    ("q", "answered", "early_stop", "stops"),
    [
        (0.95, True, True, True),  # answered, .95 > .9
        (0.9, True, True, False),  # not strictly above the threshold
        (0.99, False, True, False),  # high but not answered
        (0.95, True, False, False),  # early stop turned off (physics protocol, Sec. 4.3)
    ],
)
def test_early_stop_rule(q: float, answered: bool, early_stop: bool, stops: bool) -> None:
    tree = Tree("p")
    algo = LiteSearch(LiteSearchConfig(early_stop=early_stop))
    (expansion,) = algo.propose(tree, BUDGET)
    child = add(tree, tree.root, q, answered=answered)
    algo.observe(tree, expansion, [child])
    assert algo.should_stop(tree, BUDGET) is stops


def test_answered_without_extracted_answer_does_not_stop() -> None:
    tree = Tree("p")
    tree.add_child(
        tree.root,
        text=" done",
        q=0.99,
        answered=True,
        answer=None,
        finish=FinishReason.EOS,
        output_tokens=1,
    )
    assert not LiteSearch(LiteSearchConfig()).should_stop(tree, BUDGET)


# ----------------------------------------------------------- LiteSearch in the driver
class RecordingLite(LiteSearch):
    """LiteSearch that records every proposal with the node's room at that time."""

    def __init__(self, config: LiteSearchConfig) -> None:
        super().__init__(config)
        self.log: list[tuple[Expansion, int, float, float]] = []

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        out = super().propose(tree, budget)
        best_with_room = max(
            (
                (self.value(n), -n.id)
                for n in tree
                if self.is_candidate(n) and len(n.children) < self.width(n)
            ),
            default=None,
        )
        for e in out:
            node = tree[e.node_id]
            assert best_with_room is not None
            # the heap picks the same node as a full scan would
            assert (self.value(node), -node.id) == best_with_room
            self.log.append((e, self.room(node), budget.used, budget.total))
        return out


async def run_lite(
    mode: str, budget: float, seed: int = 0, **kw: object
) -> tuple[SearchResult, RecordingLite]:
    config = LiteSearchConfig.model_validate({"mode": mode, **kw})
    algo = RecordingLite(config)
    result = await run_search(
        "What is 3 + 4?",
        config,
        ScriptedPolicy(seed=seed),
        ScriptedScorer(seed=seed),
        budget,
        seed=seed,
        algorithm=algo,
    )
    return result, algo


@pytest.mark.parametrize("mode", ["incremental", "batch"])
async def test_litesearch_driver_run(mode: str) -> None:
    """Fake policy/PRM (no model runs in unit tests): widths are respected, sizes match mode."""
    result, algo = await run_lite(mode, 4000, early_stop=False)
    assert result.algorithm == f"litesearch_{mode}"
    assert result.c_used <= result.budget
    assert len(algo.log) == result.iterations
    for expansion, room, _, _ in algo.log:
        assert room >= 1
        assert expansion.n == (1 if mode == "incremental" else room)
    for node in result.tree:
        assert len(node.children) <= algo.width(node)


async def test_litesearch_driver_early_stop() -> None:
    """Near-1 PRM scores (App. K) and answers: the search stops early, below B."""
    config = LiteSearchConfig()
    result = await run_search(
        "What is 3 + 4?",
        config,
        ScriptedPolicy(seed=1, p_answer=0.5),
        ScriptedScorer(seed=1, distribution="near_binary", p_high=0.9),
        20_000,
        seed=1,
    )
    assert result.stop_reason == "early_stop"
    assert result.c_used < result.budget
    assert max(n.q for n in result.answered_nodes if n.answer is not None) > 0.9

    off = await run_search(
        "What is 3 + 4?",
        config.model_copy(update={"early_stop": False}),
        ScriptedPolicy(seed=1, p_answer=0.5),
        ScriptedScorer(seed=1, distribution="near_binary", p_high=0.9),
        20_000,
        seed=1,
    )
    assert off.stop_reason != "early_stop"
    assert off.c_used > result.c_used


# ----------------------------------------------------------------- (d) beam search
def test_beam_step_by_hand() -> None:
    """Step 1: the root gets K = 10 children; the top-5 by Q are kept.

    Q of children 1..10: .1 .9 .5 .9 .3 .8 .7 .2 .6 .4, child 6 (.8) answered.
    Sorted by (-Q, id): 2 (.9), 4 (.9), 6 (.8), 7 (.7), 9 (.6) | 3 (.5), ...
    Kept: 2, 4, 6, 7, 9; 6 is answered, so it is finished: beams 2, 4, 7, 9.
    """
    tree = Tree("p")
    algo = BeamSearch(BeamConfig())
    assert algo.propose(tree, BUDGET) == [Expansion(ROOT_ID, 10, NodeUnit.SEQUENTIAL)]
    qs = [0.1, 0.9, 0.5, 0.9, 0.3, 0.8, 0.7, 0.2, 0.6, 0.4]
    children = [add(tree, tree.root, q, answered=i == 5) for i, q in enumerate(qs)]
    algo.observe(tree, Expansion(ROOT_ID, 10, NodeUnit.SEQUENTIAL), children)
    assert algo.beams == [2, 4, 7, 9]
    assert algo.finished == [6]
    step2 = algo.propose(tree, BUDGET)
    assert [e.node_id for e in step2] == [2, 4, 7, 9]
    assert all(e.n == 10 for e in step2)


def test_beam_pools_all_parents_and_skips_failed() -> None:
    """Step 2 ranks the children of every beam together; failed children take no slot.

    Beams a, b.  a's children: .95 (failed), .6, .5;  b's children: .7, .4, .3.
    Candidates (failed dropped): .7 (b), .6 (a), .5 (a), .4 (b), .3 (b) -> all 5 kept.
    """
    tree = Tree("p")
    algo = BeamSearch(BeamConfig(width=5, branching=3))
    algo.propose(tree, BUDGET)
    a, b = add(tree, tree.root, 0.9), add(tree, tree.root, 0.8)
    algo.observe(tree, Expansion(ROOT_ID, 3, NodeUnit.SEQUENTIAL), [a, b])
    assert algo.beams == [a.id, b.id]
    step = algo.propose(tree, BUDGET)
    assert [e.node_id for e in step] == [a.id, b.id]
    a_kids = [add(tree, a, 0.95, error="failed"), add(tree, a, 0.6), add(tree, a, 0.5)]
    algo.observe(tree, step[0], a_kids)
    assert algo.beams == [a.id, b.id]  # the step is not complete yet
    b_kids = [add(tree, b, q) for q in (0.7, 0.4, 0.3)]
    algo.observe(tree, step[1], b_kids)
    assert algo.beams == [b_kids[0].id, a_kids[1].id, a_kids[2].id, b_kids[1].id, b_kids[2].id]


def test_beam_ends_when_every_kept_node_is_answered() -> None:
    tree = Tree("p")
    algo = BeamSearch(BeamConfig(width=2, branching=3))
    algo.propose(tree, BUDGET)
    kids = [add(tree, tree.root, 0.9, answered=True), add(tree, tree.root, 0.8, answered=True)]
    kids.append(add(tree, tree.root, 0.1))
    algo.observe(tree, Expansion(ROOT_ID, 3, NodeUnit.SEQUENTIAL), kids)
    assert algo.beams == [] and algo.finished == [kids[0].id, kids[1].id]
    assert algo.propose(tree, BUDGET) == []


def test_beam_step_completes_on_next_propose_when_expansions_are_dropped() -> None:
    """The driver dropped the 2nd expansion (never observed): the next propose closes the step."""
    tree = Tree("p")
    algo = BeamSearch(BeamConfig(width=2, branching=2))
    algo.propose(tree, BUDGET)
    a, b = add(tree, tree.root, 0.9), add(tree, tree.root, 0.8)
    algo.observe(tree, Expansion(ROOT_ID, 2, NodeUnit.SEQUENTIAL), [a, b])
    step = algo.propose(tree, BUDGET)
    only = [add(tree, a, 0.3)]  # one choice of a's expansion; b's expansion never ran
    algo.observe(tree, step[0], only)
    assert algo.steps == 1
    nxt = algo.propose(tree, BUDGET)
    assert algo.steps == 2
    assert nxt == [Expansion(only[0].id, 2, NodeUnit.SEQUENTIAL)]


class RecordingBeam(BeamSearch):
    def __init__(self, config: BeamConfig) -> None:
        super().__init__(config)
        self.steps_log: list[list[int]] = []

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        out = super().propose(tree, budget)
        if out:
            self.steps_log.append([e.node_id for e in out])
        return out


async def run_beam(budget: float, seed: int) -> tuple[SearchResult, RecordingBeam]:
    config = BeamConfig()
    algo = RecordingBeam(config)
    result = await run_search(
        "What is 3 + 4?",
        config,
        ScriptedPolicy(seed=seed, step_tokens=(5, 15), p_answer=0.3),
        ScriptedScorer(seed=seed),
        budget,
        seed=seed,
        algorithm=algo,
    )
    return result, algo


@pytest.mark.parametrize("seed", [0, 6])
async def test_beam_driver_run(seed: int) -> None:
    """Fake policy/PRM (no model runs in unit tests); App. H's beam invariants, step by step."""
    result, algo = await run_beam(20_000, seed)
    tree, W, K = result.tree, 5, 10
    assert result.algorithm == "beam"
    assert result.stop_reason == "algorithm_done"  # budget left unused
    assert result.c_used <= result.budget
    assert algo.steps_log[0] == [ROOT_ID]
    for step, nxt in zip(algo.steps_log, [*algo.steps_log[1:], []], strict=True):
        assert len(step) <= W
        pool = [c for b in step for c in tree.children(tree[b])]
        assert all(len(tree[b].children) == K for b in step)
        kept = sorted((c for c in pool if c.expandable), key=lambda c: (-c.q, c.id))[:W]
        assert nxt == [c.id for c in kept if not c.answered]
    expanded = {b for step in algo.steps_log for b in step}
    assert not any(tree[b].answered for b in expanded)
    assert len(algo.steps_log) >= 2


@pytest.mark.parametrize(("budget", "short"), [(300, True), (1_000, False), (2_500, True)])
async def test_beam_budget_end(budget: int, short: bool) -> None:
    """A small B: the last step may come back short (the driver dropped trailing choices and
    whole expansions), but C_used <= B and every earlier step is complete."""
    result, algo = await run_beam(budget, 1)
    assert result.c_used <= result.budget
    assert result.stop_reason == "budget_exhausted"
    for step in algo.steps_log[:-1]:
        assert all(len(result.tree[b].children) == 10 for b in step)
    last = [len(result.tree[b].children) for b in algo.steps_log[-1]]
    assert (sum(last) < 10 * len(last)) is short


# ---------------------------------------------------------------- (e) C_used <= B
@pytest.mark.parametrize("budget", [50, 500, 3_000])
@pytest.mark.parametrize("name", ["incremental", "batch", "beam"])
async def test_never_over_budget(name: str, budget: int) -> None:
    """C_used <= B at every trace point, for every algorithm of this file (fake policy/PRM)."""
    config = BeamConfig() if name == "beam" else LiteSearchConfig(mode=name, early_stop=False)
    algo = make_algorithm(config)
    assert algo.name == ("beam" if name == "beam" else f"litesearch_{name}")
    result = await run_search(
        "What is 3 + 4?", config, ScriptedPolicy(seed=2), ScriptedScorer(seed=2), budget, seed=2
    )
    assert result.c_used <= budget
    assert all(point.c_used <= budget for point in result.trace)
