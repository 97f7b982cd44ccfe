"""`conventions: paper | reference`, checked node for node on scripted worlds.

Each algorithm runs through the real driver (`run_search`) against the
deterministic world of `tests/search/world.py` and is compared with

* hand-written expected expansion orders and scores on small worlds, and
* the plain implementations of `tests/search/straightforward.py` (written from
  the rules, sharing no code with `search/`) on many seeded worlds: the same
  nodes in the same order with the same Q, and the same tokens spent.

The one budget-end rule that differs: when a fixed charge alone overruns B, the
released code adds an empty node of Q = 0 before it stops; `search/` and the
plain implementations stop without it, so that node is never compared.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from search import parse_search_config, run_search
from search.algorithms import make_algorithm
from search.algorithms.puct import PuctSearch
from search.driver import SearchResult
from search.formulas import litesearch_width, litesearch_width_truncated
from tests.search import straightforward as plain
from tests.search.conftest import small_tree
from tests.search.world import HashWorld, Outcome, TableWorld, World, WorldPolicy, WorldScorer

SEEDS = range(40)


def _run(world: World, budget: int, **config: Any) -> SearchResult:
    policy, scorer = WorldPolicy(world), WorldScorer(world)
    return asyncio.run(run_search("p", parse_search_config(config), policy, scorer, budget))


def _nodes(result: SearchResult) -> list[tuple[tuple[int, ...], float, bool]]:
    """(path, Q, answered) of every node but the root, in creation order."""
    tree, out = result.tree, []
    for node in list(tree)[1:]:
        path, current = [], node
        while current.parent_id is not None:
            parent = tree[current.parent_id]
            path.append(parent.children.index(current.id))
            current = parent
        out.append((tuple(reversed(path)), node.q, node.answered))
    return out


def _paths(result: SearchResult) -> list[tuple[int, ...]]:
    return [path for path, _, _ in _nodes(result)]


# --------------------------------------------------------------- config
def test_reference_sets_the_released_fixed_charges_and_paper_keeps_ours() -> None:
    ref = parse_search_config({"algorithm": "bg_mcts", "conventions": "reference"})
    assert (ref.root_child_charge, ref.continuation_charge) == (4, 15)
    paper = parse_search_config({"algorithm": "bg_mcts"})
    assert (paper.conventions, paper.root_child_charge, paper.continuation_charge) == (
        "paper",
        0,
        None,
    )
    mixed = parse_search_config(
        {"algorithm": "mcts", "conventions": "reference", "root_child_charge": 0}
    )
    assert (mixed.root_child_charge, mixed.continuation_charge) == (0, 15)


@pytest.mark.parametrize(
    "algorithm", ["bg_mcts", "mcts", "litesearch", "beam", "repeated_sampling", "refinement"]
)
def test_every_config_takes_conventions_and_rejects_unknown_ones(algorithm: str) -> None:
    assert parse_search_config({"algorithm": algorithm, "conventions": "reference"}).reference
    with pytest.raises(ValueError, match="conventions"):
        parse_search_config({"algorithm": algorithm, "conventions": "released"})


# --------------------------------------------------------------- hand-computed statistics
def test_reference_bg_mcts_gives_the_roots_children_no_exploration() -> None:
    """small_tree: a (Q .8, subtree .8 .6 1.0), b (Q .4); at rho = 1 W~ = W."""
    tree = small_tree()
    paper = make_algorithm(parse_search_config({"algorithm": "bg_mcts"}))
    ref = make_algorithm(parse_search_config({"algorithm": "bg_mcts", "conventions": "reference"}))
    assert isinstance(paper, PuctSearch) and isinstance(ref, PuctSearch)
    p_a = math.exp(0.8) / (math.exp(0.8) + math.exp(0.4))
    by_ref = {n.id: s for n, s in ref.child_scores(tree, tree.root, 1.0)}
    assert by_ref == pytest.approx({1: 2.4 / 3, 2: 0.4})  # exploitation only
    by_paper = {n.id: s for n, s in paper.child_scores(tree, tree.root, 1.0)}
    explore_a = math.sqrt(2) * p_a * math.sqrt(math.log(5) / 3)
    assert by_paper[1] == pytest.approx(2.4 / 3 + explore_a)
    # below the root both count visits: node a (m = 3) is a parent like any other
    a = tree[1]
    assert {n.id: s for n, s in ref.child_scores(tree, a, 1.0)} == pytest.approx(
        {n.id: s for n, s in paper.child_scores(tree, a, 1.0)}
    )


def test_reference_mcts_counts_each_node_twice_and_uses_the_fourth_root_of_two() -> None:
    """small_tree under the released MCTS: root visits 4 (nodes below it); a: 4 visits, value
    .8 + .6 + 1.0 + .8 = 3.2; b: 2 visits, value .8; weight 2 ** 0.25."""
    tree = small_tree()
    ref = make_algorithm(parse_search_config({"algorithm": "mcts", "conventions": "reference"}))
    assert isinstance(ref, PuctSearch)
    p_a = math.exp(0.8) / (math.exp(0.8) + math.exp(0.4))
    c = 2**0.25
    expected = {
        1: 3.2 / 4 + c * p_a * math.sqrt(math.log(4) / 4),  # 1.219
        2: 0.8 / 2 + c * (1 - p_a) * math.sqrt(math.log(4) / 2),  # 0.797
    }
    assert {n.id: s for n, s in ref.child_scores(tree, tree.root, 1.0)} == pytest.approx(expected)
    assert expected[1] == pytest.approx(1.2191, abs=1e-4)


@pytest.mark.parametrize(
    ("value", "truncated", "rounded_up"), [(0.3, 6, 7), (0.5, 3, 4), (0.7, 1, 2)]
)
def test_litesearch_widths_at_depth_one(value: float, truncated: int, rounded_up: int) -> None:
    assert litesearch_width_truncated(value, 1, 0.9, 10) == truncated
    assert litesearch_width(value, 1, 0.9, 10) == rounded_up


def test_litesearch_width_edges_where_the_released_code_crashes() -> None:
    assert litesearch_width_truncated(0.0, 3, 0.9, 10) == 10  # ln(1) = 0: never reaches epsilon
    assert litesearch_width_truncated(1.0, 3, 0.9, 10) == 1  # ln(0): reaches it at once


# --------------------------------------------------------------- hand-written expansion orders
_FLAT = TableWorld({})  # every node: Q 0.3, 10 tokens, no answer


def test_litesearch_incremental_order_by_hand() -> None:
    """Every node Q .3 and 10 tokens, B = 100.  The root (v = 0) goes first, then its
    child (0,) (v = .3) is filled: 7 children (ceil) or 6 (int); then the earliest
    full-value node with room, (0, 0), at depth 2: ceil(7/2) = 4 or int(6.46/2) = 3.
    Reference: the first child costs 4 + 10, so the 10th node is cut to 6 tokens."""
    paper = _run(_FLAT, 100, algorithm="litesearch", early_stop=False)
    assert _paths(paper) == [(0,), *[(0, i) for i in range(7)], (0, 0, 0), (0, 0, 1)]
    ref = _run(_FLAT, 100, algorithm="litesearch", early_stop=False, conventions="reference")
    assert _paths(ref) == [(0,), *[(0, i) for i in range(6)], (0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert (paper.c_used, ref.c_used) == (100, 100)
    assert ref.tree[10].output_tokens == 6


def test_litesearch_batch_requests_by_hand() -> None:
    """Batch: one request per expansion (paper) or one per child (reference)."""
    world = _FLAT
    policy = WorldPolicy(world)
    config = parse_search_config({"algorithm": "litesearch", "mode": "batch", "early_stop": False})
    asyncio.run(run_search("p", config, policy, WorldScorer(world), 100))
    # the root first: with v = 0 it may get 10 children, all asked for in one request
    assert policy.requests[0][:2] == ((), 10)
    ref_policy = WorldPolicy(world)
    ref = parse_search_config(
        {"algorithm": "litesearch", "mode": "batch", "early_stop": False}
        | {"conventions": "reference"}
    )
    asyncio.run(run_search("p", ref, ref_policy, WorldScorer(world), 100))
    assert {n for _, n, _ in ref_policy.requests} == {1}
    assert [parent for parent, _, _ in ref_policy.requests[:7]] == [()] * 7  # root: 7 of 10 fit


def test_bg_mcts_first_expansions_by_hand() -> None:
    """Root children (0,) Q .9 and (1,) Q .5, all else Q .3, 10 tokens each, B = 1000.
    After the root's k = 2 children: (0,) scores .9 + .02 (+ exploration under paper) against
    E_gen = .7 + rho .04, so both conventions descend to the leaf (0,) and add its 2 children."""
    world = TableWorld({(0,): Outcome(0.9, 10, False), (1,): Outcome(0.5, 10, False)})
    for conventions in ("paper", "reference"):
        result = _run(world, 1000, algorithm="bg_mcts", conventions=conventions)
        assert _paths(result)[:4] == [(0,), (1,), (0, 0), (0, 1)], conventions


def test_reference_charges_root_children_and_continuations() -> None:
    """Refinement on answered full generations of 40 tokens: 4 + 40, then 15 + 40 per step."""
    world = TableWorld({}, default=Outcome(0.5, 40, True))
    ref = _run(world, 200, algorithm="refinement", conventions="reference")
    assert [n.inserted_tokens for n in list(ref.tree)[1:]] == [4, 15, 15, 15]
    # the last one: 200 - 44 - 55 - 55 - 15 = 31
    assert [n.output_tokens for n in list(ref.tree)[1:]] == [40, 40, 40, 31]
    paper = _run(world, 200, algorithm="refinement")
    # the prompt's token count (9 words here); 200 - 40 - 3 x 49 = 13 leaves 4 for the last one
    assert [n.inserted_tokens for n in list(paper.tree)[1:]] == [0, 9, 9, 9, 9]
    assert [n.output_tokens for n in list(paper.tree)[1:]] == [40, 40, 40, 40, 4]
    assert ref.c_used == paper.c_used == 200


# --------------------------------------------------------------- differential, many worlds
def _compare(result: SearchResult, expected: tuple[list[Any], int]) -> None:
    nodes, used = expected
    assert _nodes(result) == nodes
    assert result.c_used == used


@pytest.mark.parametrize("conventions", ["paper", "reference"])
def test_bg_mcts_matches_the_plain_implementation(conventions: str) -> None:
    for seed in SEEDS:
        world = HashWorld(seed)
        result = _run(world, 1500, algorithm="bg_mcts", conventions=conventions)
        _compare(result, plain.bg_mcts(world, 1500, conventions == "reference"))


@pytest.mark.parametrize("conventions", ["paper", "reference"])
def test_mcts_matches_the_plain_implementation(conventions: str) -> None:
    for seed in SEEDS:
        world = HashWorld(seed)
        result = _run(world, 1500, algorithm="mcts", conventions=conventions)
        _compare(result, plain.mcts(world, 1500, conventions == "reference"))


@pytest.mark.parametrize("conventions", ["paper", "reference"])
@pytest.mark.parametrize("mode", ["incremental", "batch"])
def test_litesearch_matches_the_plain_implementation(conventions: str, mode: str) -> None:
    for seed in SEEDS:
        world = HashWorld(seed, p_answer=0.1)
        result = _run(world, 1500, algorithm="litesearch", mode=mode, conventions=conventions)
        expected = plain.litesearch(world, 1500, conventions == "reference", mode == "batch")
        _compare(result, expected)


@pytest.mark.parametrize("conventions", ["paper", "reference"])
def test_sampling_baselines_match_the_plain_implementation(conventions: str) -> None:
    reference = conventions == "reference"
    for seed in SEEDS:
        world = HashWorld(seed, full_generation=True)
        result = _run(world, 3000, algorithm="repeated_sampling", conventions=conventions)
        _compare(result, plain.repeated_sampling(world, 3000, reference))
        result = _run(world, 3000, algorithm="refinement", conventions=conventions)
        _compare(result, plain.refinement(world, 3000, reference))


def test_the_conventions_change_decisions_on_these_worlds() -> None:
    """The suite is not comparing two copies of one rule: paper and reference differ."""
    differ = {
        name: sum(
            _paths(_run(HashWorld(seed), 1500, algorithm=name))
            != _paths(_run(HashWorld(seed), 1500, algorithm=name, conventions="reference"))
            for seed in SEEDS
        )
        for name in ("bg_mcts", "mcts", "litesearch")
    }
    assert all(count > len(SEEDS) // 2 for count in differ.values()), differ
