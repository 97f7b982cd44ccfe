"""The night allocator (`pipeline.run.allocation`): second-tree budgets from committed probes.

Pure logic: the probes are `ProbeOutcome`s written here, as a committed probe tree's
counts would give them (the simulated night, `tests/pipeline/evaluation/
test_night_allocation.py`, feeds it real trees)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pipeline.records import RecordsConfig
from pipeline.run.allocation import (
    AllocationConfig,
    NightAllocator,
    ProbeOutcome,
    expected_rows,
    fit_prior,
    record_caps,
)

B = 10_000
ON = AllocationConfig(enabled=True)  # probe_fraction 0.65: a probe B of 6,500
PROBE = 6_500


def probe(
    i: int, right: int, wrong: int, *, spent: float = PROBE, rows: dict[str, int] | None = None
) -> ProbeOutcome:
    answered = right + wrong
    default = {"sft": min(2, right), "dpo": min(4, right, wrong), "step_dpo": min(4, right, wrong)}
    return ProbeOutcome(
        f"p{i}", spent, right, wrong, answered, rows if rows is not None else default
    )


def night(
    windows: list[list[ProbeOutcome]], config: AllocationConfig = ON
) -> list[tuple[int, ...]]:
    allocator = NightAllocator(config, B)
    return [allocator.allocate(w).budgets for w in windows]


def test_off_by_default_and_bad_settings_are_refused() -> None:
    assert AllocationConfig().enabled is False
    with pytest.raises(ValidationError, match="prior"):
        AllocationConfig(prior=(0.0, 1.0))
    with pytest.raises(ValidationError, match="max_multiple"):
        AllocationConfig(max_multiple=0.2, probe_fraction=0.3)
    with pytest.raises(ValidationError, match="probe_fraction"):
        AllocationConfig(probe_fraction=1.0)


def test_the_same_committed_probes_give_the_same_budgets() -> None:
    windows = [[probe(i + 8 * w, (i * 7 + w) % 4, (i * 5) % 3) for i in range(8)] for w in range(3)]
    assert night(windows) == night(windows)


def test_a_mixed_probe_gets_more_than_an_easy_one_and_an_easy_one_little() -> None:
    kinds = [(1, 1), (5, 0), (0, 3), (0, 0)]  # mixed, easy, wrong answers only, no answer
    window = [probe(i, *kinds[i % 4]) for i in range(16)]
    budgets = night([window])[0]
    mixed, easy, wrong, unanswered = (sum(budgets[k::4]) for k in range(4))
    assert mixed > max(easy, wrong, unanswered)
    assert easy <= 0.1 * sum(budgets)


def test_a_stretch_of_easy_problems_leaves_its_share_to_later_windows() -> None:
    allocator = NightAllocator(ON, B)
    allocator.allocate([probe(i, 2, 2) for i in range(16)])  # what a window usually gets
    easy = allocator.allocate([probe(16 + i, 10, 0) for i in range(16)])
    assert sum(easy.budgets) < 0.5 * easy.pool
    assert easy.carry == pytest.approx(easy.pool - sum(easy.budgets))
    mixed = allocator.allocate([probe(32 + i, 2, 2) for i in range(16)])
    # the mixed window gives out more than its own share: the easy one's too
    assert sum(mixed.budgets) > 16 * (B - PROBE)
    # the night's last window holds nothing back
    last = allocator.allocate([probe(48 + i, 6, 0) for i in range(16)], last=True)
    assert last.carry < B * ON.step_fraction


def test_an_all_hard_window_still_gives_its_pool_where_a_right_answer_may_come() -> None:
    plan = night([[probe(i, 0, 2) for i in range(8)]])[0]
    assert all(b > 0 for b in plan)


def test_a_probe_whose_caps_are_full_gets_nothing() -> None:
    full = {"sft": 2, "dpo": 4, "step_dpo": 4}
    budgets = night([[probe(0, 4, 4, rows=full), probe(1, 1, 1)]])[0]
    assert budgets[0] == 0 and budgets[1] > 0


def test_the_minimum_share_gives_every_problem_a_second_tree() -> None:
    config = AllocationConfig(enabled=True, min_fraction=0.9)
    window = [probe(i, 6, 0, spent=5_000 + 100 * i) for i in range(5)] + [probe(9, 1, 1)]
    budgets = night([window], config)[0]
    for outcome, budget in zip(window, budgets, strict=True):
        assert outcome.spent + budget >= 0.9 * B


def test_a_probe_that_spent_more_than_its_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="p0 spent 6501"):
        NightAllocator(ON, B).allocate([probe(0, 1, 1, spent=6_501)])


outcomes = st.builds(
    lambda right, wrong, spent, sft, pairs: (right, wrong, spent, sft, pairs),
    st.integers(0, 12),
    st.integers(0, 12),
    st.integers(0, PROBE),
    st.integers(0, 3),
    st.integers(0, 5),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=st.lists(st.lists(outcomes, min_size=1, max_size=12), min_size=1, max_size=5),
    min_fraction=st.sampled_from([0.0, 0.5, 0.8, 1.0]),
    max_multiple=st.sampled_from([1.0, 2.0, 4.0]),
    prior=st.sampled_from([None, (1.0, 1.0), (0.3, 0.2)]),
)
def test_the_night_never_gives_out_more_than_its_total(
    windows: list[list[tuple[int, int, int, int, int]]],
    min_fraction: float,
    max_multiple: float,
    prior: tuple[float, float] | None,
) -> None:
    config = AllocationConfig(
        enabled=True,
        min_fraction=min_fraction,
        max_multiple=max_multiple,
        prior=prior,
    )
    allocator = NightAllocator(config, B)
    problems = spent = 0.0
    for w, window in enumerate(windows):
        probes = [
            probe(100 * w + i, r, x, spent=s, rows={"sft": sft, "dpo": pairs, "step_dpo": pairs})
            for i, (r, x, s, sft, pairs) in enumerate(window)
        ]
        plan = allocator.allocate(probes)
        problems += len(probes)
        spent += sum(p.spent for p in probes) + sum(plan.budgets)
        assert spent <= problems * B  # never past the shares handed out so far
        for p, budget in zip(probes, plan.budgets, strict=True):
            assert isinstance(budget, int) and budget >= 0
            assert p.spent + budget <= max_multiple * B
            if min_fraction > ON.probe_fraction and budget == 0:
                assert p.spent >= min_fraction * B  # the minimum holds unless the probe had it
        assert plan.carry >= 0


def test_the_value_of_more_budget_grows_with_it_and_stops_at_the_caps() -> None:
    caps = record_caps(RecordsConfig())
    mixed = probe(0, 1, 1)
    values = [expected_rows(mixed, m, ON, caps) for m in (0, 1, 2, 4, 8, 16, 64)]
    assert values == sorted(values) and values[0] == 0
    # sft 2 and 4 + 4 pairs at most, less what the probe holds, at the default weights
    assert values[-1] <= 0.5 * (2 - 1) + 1.0 * (4 - 1) * 2 + 1e-9
    full = probe(1, 4, 4, rows={"sft": 2, "dpo": 4, "step_dpo": 4})
    assert expected_rows(full, 16, ON, caps) == 0


def test_the_fitted_prior_follows_the_probes() -> None:
    # probes that are all right or all wrong: a U-shaped prior (both parameters below 1)
    a, b = fit_prior({(4, 4): 50, (0, 4): 50})
    assert a < 1 and b < 1
    # probes half right: a prior centred on one half
    a, b = fit_prior({(2, 4): 100})
    assert a > 1 and b > 1 and abs(a - b) < 0.5 * a
    assert fit_prior({}) == (1.0, 1.0)


def test_a_killed_night_replays_its_committed_probes_to_the_same_budgets() -> None:
    windows = [
        [probe(i + 10 * w, (i + w) % 5, (2 * i + w) % 3) for i in range(10)] for w in range(4)
    ]
    whole = night(windows)
    # killed after two windows: a fresh allocator replays the committed probes in order
    rerun = NightAllocator(ON, B)
    replayed = [rerun.allocate(w).budgets for w in windows[:2]]
    assert replayed == whole[:2]
    assert [rerun.allocate(w).budgets for w in windows[2:]] == whole[2:]
