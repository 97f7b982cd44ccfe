"""The night allocator's windows in a stream (`pipeline.run.night_windows`): problems arrive
in any order, each window is allocated once complete and after the windows before it,
a rerun that replays the committed probes gets the same second trees, and the night
never passes its total.  Pure logic: the probes are `ProbeOutcome`s written here."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.run.allocation import AllocationConfig, NightAllocator, ProbeOutcome
from pipeline.run.night_windows import Member, NightWindows, kept_rows, outcome_of

B = 1_000
ON = AllocationConfig(enabled=True, window=4)
PROBE = 650


def _outcome(i: int) -> ProbeOutcome:
    right, wrong = (i * 7) % 4, (i * 5) % 3
    rows = {"sft": min(2, right), "dpo": min(right, wrong), "step_dpo": min(right, wrong)}
    return ProbeOutcome(f"p{i}", PROBE - (i % 3) * 50, right, wrong, right + wrong, rows)


def _members(n: int, bad: frozenset[int] = frozenset()) -> list[Member]:
    return [
        Member(i, None if i in bad else f"p{i}", None if i in bad else _outcome(i))
        for i in range(n)
    ]


def _in_order(n: int, bad: frozenset[int] = frozenset()) -> list[tuple[int, ...]]:
    """The allocator called window by window in source order, as the simulated night does."""
    allocator = NightAllocator(ON, B)
    windows = range(0, n, ON.window)
    return [
        allocator.allocate(
            [_outcome(i) for i in range(s, min(s + ON.window, n)) if i not in bad],
            last=s + ON.window >= n,
        ).budgets
        for s in windows
    ]


def test_members_in_any_order_give_the_budgets_of_the_windows_in_source_order() -> None:
    n, bad = 18, frozenset({3, 9})
    members = _members(n, bad)
    random.Random(0).shuffle(members)
    windows = NightWindows(NightAllocator(ON, B), n)
    seconds = [s for m in members for s in windows.add(m)]
    assert windows.done and windows.plans == _in_order(n, bad)
    given = {s.problem_id: s.budget for s in seconds}
    expected = {
        f"p{i}": b
        for plan, start in zip(_in_order(n, bad), range(0, n, ON.window), strict=True)
        for i, b in zip(
            [i for i in range(start, start + 4) if i < n and i not in bad], plan, strict=True
        )
        if b
    }
    assert given == expected and given
    # each second tree names the probes its window was allocated from
    assert all(f"p{s.index}" in s.window_probes for s in seconds)


def test_a_window_waits_for_its_members_and_for_the_windows_before_it() -> None:
    windows = NightWindows(NightAllocator(ON, B), 8)
    for m in _members(8)[4:]:  # the second window complete first: nothing yet
        assert windows.add(m) == []
    out = []
    for m in _members(8)[:4]:
        out += windows.add(m)
    assert windows.done and {s.index // 4 for s in out} <= {0, 1}
    assert len(windows.plans) == 2


def test_a_rerun_replaying_the_committed_probes_gives_the_same_second_trees() -> None:
    n = 12
    whole = NightWindows(NightAllocator(ON, B), n)
    first = {s.problem_id: s.budget for m in _members(n) for s in whole.add(m)}
    # killed after some second trees were committed: the rerun replays every committed
    # probe (members marked second_done where the second tree is in too)
    committed = set(list(first)[: len(first) // 2])
    rerun = NightWindows(NightAllocator(ON, B), n)
    members = _members(n)
    random.Random(1).shuffle(members)
    again = {
        s.problem_id: s.budget
        for m in members
        for s in rerun.add(
            Member(m.index, m.problem_id, m.outcome, second_done=m.problem_id in committed)
        )
    }
    assert rerun.plans == whole.plans
    assert again == {p: b for p, b in first.items() if p not in committed}


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**16))
def test_the_night_never_spends_more_than_its_total(n: int, seed: int) -> None:
    rng = random.Random(seed)
    members = [
        Member(
            i,
            f"p{i}",
            ProbeOutcome(
                f"p{i}",
                rng.uniform(0, PROBE),
                (r := rng.randint(0, 5)),
                (w := rng.randint(0, 5)),
                r + w + rng.randint(0, 2),
            ),
        )
        for i in range(n)
    ]
    rng.shuffle(members)
    windows = NightWindows(NightAllocator(ON, B), n)
    seconds = [s for m in members for s in windows.add(m)]
    spent = sum(m.outcome.spent for m in members if m.outcome is not None)
    assert windows.done and spent + sum(s.budget for s in seconds) <= n * B


def test_a_place_outside_the_selection_or_twice_is_refused() -> None:
    windows = NightWindows(NightAllocator(ON, B), 3)
    with pytest.raises(ValueError, match="outside the selection"):
        windows.add(Member(3, "p3", _outcome(3)))
    windows.add(Member(0, "p0", _outcome(0)))
    with pytest.raises(ValueError, match="came twice"):
        windows.add(Member(0, "p0", _outcome(0)))


def test_a_probe_outcome_round_trips_through_its_trees_row() -> None:
    o = _outcome(5)
    records = {"sft": [{}] * o.rows["sft"], "dpo": [{}] * o.rows["dpo"], "step_dpo": []}
    row = {
        "problem_id": o.problem_id,
        "c_used": o.spent,
        "n_correct": o.correct,
        "n_incorrect": o.incorrect,
        "n_answered": o.answered,
        "kept_rows": [{"table": t, "rows": n} for t, n in kept_rows(records).items()],
    }
    back = outcome_of(row)
    assert (back.problem_id, back.spent, back.correct, back.incorrect, back.answered) == (
        o.problem_id,
        o.spent,
        o.correct,
        o.incorrect,
        o.answered,
    )
    assert back.rows == {
        "sft": o.rows["sft"],
        "dpo": o.rows["dpo"],
        "step_dpo": 0,
        "prm": 0,
        "kto": 0,
    }
