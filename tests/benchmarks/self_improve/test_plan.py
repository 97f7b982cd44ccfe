"""benchmarks/self_improve/plan.py: the selections are fixed, disjoint and of the right
number of operations, and the held-out set does not depend on anything chosen after it."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.self_improve.plan import QUICK, choose_operations, selections
from pipeline.problems.arithmetic import generate


def texts(problems: list[dict[str, object]]) -> set[object]:
    return {p["problem"] for p in problems}


def test_every_selection_is_text_disjoint_from_the_others() -> None:
    sel = selections(QUICK)
    groups = [sel.heldout, sel.round0, *sel.probe.values(), sel.round1(2, 16), sel.round1(3, 16)]
    for i, a in enumerate(groups):
        assert len(texts(a)) == len(a)  # no repeated text inside a selection
        for b in groups[i + 1 :]:
            assert not texts(a) & texts(b)


def test_operations_are_what_each_selection_asks_for() -> None:
    sel = selections(QUICK)
    assert {p["steps"] for p in sel.round0} == {1, 2}
    assert {p["steps"] for p in sel.heldout} == {2, 3}
    assert {p["steps"] for p in sel.probe[2]} == {2}
    assert {p["steps"] for p in sel.probe[3]} == {3}
    assert {p["steps"] for p in sel.round1(3, 10)} == {3}
    assert len(sel.heldout) == QUICK.heldout and len(sel.round0) == QUICK.round0_problems


def test_round0_is_the_embedded_defaults_problems() -> None:
    """Round 0 searches the pipeline's own arithmetic source (seed 0, up to two steps), so
    the held-out set excludes exactly the problems the run searched."""
    assert selections(QUICK).round0 == generate(0, QUICK.round0_problems, max_steps=2)


def test_the_held_out_set_is_chosen_before_the_others_and_does_not_move() -> None:
    """A bigger probe or round 1 never changes the held-out problems."""
    a = selections(QUICK)
    b = selections(dataclasses.replace(QUICK, probe_problems=40, round1_problems=60))
    assert a.heldout == b.heldout


@pytest.mark.parametrize(
    ("pass_at_1", "chosen"),
    [
        ({2: 0.3, 3: 0.12}, 2),  # the fewest operations in the band
        ({2: 0.6, 3: 0.2}, 3),
        ({2: 0.05, 3: 0.01}, 2),  # none in the band: the nearest
        ({2: 0.9, 3: 0.55}, 3),
    ],
)
def test_round_one_trains_where_the_policy_is_neither_lost_nor_done(
    pass_at_1: dict[int, float], chosen: int
) -> None:
    assert choose_operations(pass_at_1) == chosen
