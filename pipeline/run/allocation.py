"""One night's token budget given to the problems that yield training data (pure: no Ray, no I/O).

A night of N problems at budget B spends at most T = N x B.  Uniform B (the default) gives
every problem one BG-MCTS tree at B.  With `AllocationConfig.enabled` every problem gets two
independent trees instead, each an exact BG-MCTS search at a B fixed before it starts:

1. a *probe* tree at ``probe_fraction x B``;
2. a *second* tree whose B this module decides from the probe's outcome, or none.

Problems arrive in windows of `AllocationConfig.window` (in the source's order); once a
window's probes are committed, `NightAllocator.allocate` gives out that window's pool:
its share of T (window size x B) less what its probes spent, plus what earlier windows
left (`carry`).  So the night never spends more than T (every tree's C_used <= its B,
and the probes' spend plus the second trees' Bs never exceed the shares handed out), and
the allocation is a function of the committed probes alone, window after window: a
killed night that reruns its committed probes gets the same second-tree budgets.

What more budget is worth (`expected_rows`)
    The per-problem caps of the records config (``sft_top_k`` SFT rows,
    ``max_pairs_per_problem`` DPO and step-DPO pairs) hold across a problem's two trees
    (`pipeline.records.problem_trees`), so a table whose cap the probe already filled
    gains nothing.  A problem's share p of right answers gets a Beta posterior from the
    probe's graded answered nodes (k right, j wrong) on a prior (``prior``, or by default
    one fitted to the night's committed probes so far: `fit_prior`).  A second tree that
    reaches m answered nodes, K ~ BetaBinomial(m) of them right, adds in expectation:

    * sft rows: min(room, K);
    * pairs (dpo, step_dpo): min(k + K, j + m - K) less the pairs already committed, within
      the room: the problem's trees are paired as one forest, so a right answer of the
      second tree pairs with a wrong one of the probe, and a node serves one pair;
    * prm, kto rows (no per-problem cap): m (one row per answered path).

    m = the second tree's B x the problem's answered nodes per token, shrunk toward the
    night's running mean by one answer (from committed probes only: a probe that answered
    nothing needed more than its B for one answer).  A mixed probe is worth most (pairs
    need both); a probe whose answers were all right is worth little once its SFT rows are
    in; a probe with wrong answers only is worth something (a right answer would pair).

How the pool is given out
    Greedily by the best expected value per token: each step gives one problem the
    increase (in multiples of ``step_fraction x B``, at least ``min_tree_fraction x B``
    for a tree not yet started) whose average gain per token is the highest of all the
    window's problems (the value is not concave in B: a pair needs two answers first, so
    one small step may be worth nothing where a larger one is worth much).  It stops when
    the pool is spent, no increase gains anything, or the best gains less per token than
    ``hold_below`` of what the night's earlier windows got (not in the night's last
    window); what is left carries to the next window.  ``min_fraction`` first gives every
    problem a second tree so that its two trees hold at least that share of B (easy
    problems kept represented); ``max_multiple`` caps a problem's two trees at that many B.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy.special import betaln

from pipeline.config import AllocationConfig, TableWeights
from pipeline.records import RecordsConfig

PAIR_TABLES = ("dpo", "step_dpo")
MAX_ANSWERS = 64
ROW_TABLES = ("sft", "dpo", "step_dpo", "prm", "kto")


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What the allocator reads of one committed probe tree."""

    problem_id: str
    spent: float  # the probe's C_used (cost units, <= its B)
    correct: int  # answered nodes labelled right
    incorrect: int  # answered nodes labelled wrong
    answered: int  # answered nodes, graded or not
    rows: Mapping[str, int] = field(default_factory=dict)  # kept rows per table


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """One window's second-tree budgets (0: no second tree), in the window's order."""

    budgets: tuple[int, ...]
    pool: float  # what the window could give out
    carry: float  # what it left to the next window
    tokens_per_answer: float  # the running estimate it used
    prior: tuple[float, float]  # the Beta prior it used


def expected_rows(
    outcome: ProbeOutcome,
    answers: float,
    config: AllocationConfig,
    caps: Mapping[str, float],
    prior: tuple[float, float] = (1.0, 1.0),
) -> float:
    """The weighted rows a second tree with `answers` answered nodes adds (module docstring);
    a fractional count interpolates between the two whole ones."""
    if answers <= 0:
        return 0.0
    uncapped = (config.weights.prm + config.weights.kto) * answers
    # past `MAX_ANSWERS` the capped tables are full whatever the probe said (the caps are a
    # few rows): the sum over K stays short
    low = math.floor(min(answers, MAX_ANSWERS))
    share = min(answers, MAX_ANSWERS) - low
    # many probes share their counts: the value of whole counts is cached across them
    key = (
        outcome.correct,
        outcome.incorrect,
        tuple(sorted(outcome.rows.items())),
        config.weights,
        tuple(sorted(caps.items())),
        prior,
    )
    value = _expected_rows(*key, low)
    if share > 0:
        value += share * (_expected_rows(*key, low + 1) - value)
    return value + uncapped


@lru_cache(maxsize=1 << 16)
def _expected_rows(
    correct: int,
    incorrect: int,
    committed: tuple[tuple[str, int], ...],
    weights: TableWeights,
    cap_items: tuple[tuple[str, float], ...],
    prior: tuple[float, float],
    m: int,
) -> float:
    """Over the beta-binomial count K of right answers among m (the posterior after the
    probe): sft rows min(room, K); pairs of the problem's forest (both trees: a right
    answer of one pairs with a wrong one of the other) min(right, wrong) less the pairs
    already committed, within the room (prm and kto rows, m, are `expected_rows`')."""
    if m <= 0:
        return 0.0
    a, b = prior[0] + correct, prior[1] + incorrect
    rows_now, caps = dict(committed), dict(cap_items)
    rooms = {
        table: max(0.0, caps.get(table, math.inf) - rows_now.get(table, 0)) for table in ROW_TABLES
    }
    base = _log_beta(a, b)
    value = 0.0
    for k in range(m + 1):
        chance = math.exp(
            math.lgamma(m + 1)
            - math.lgamma(k + 1)
            - math.lgamma(m - k + 1)
            + _log_beta(a + k, b + m - k)
            - base
        )
        pairable = min(correct + k, incorrect + m - k)
        rows = weights.sft * min(rooms["sft"], k)
        for table in PAIR_TABLES:
            new = max(0.0, pairable - rows_now.get(table, 0))
            rows += getattr(weights, table) * min(rooms[table], new)
        value += chance * rows
    return value


# the grid the fitted prior is chosen on: a and b from 0.05 to 20, evenly in log space
_GRID = tuple(0.05 * 400 ** (i / 39) for i in range(40))


def fit_prior(graded: Mapping[tuple[int, int], int]) -> tuple[float, float]:
    """The Beta(a, b) on `_GRID` that makes the probes' (right, graded) counts most likely
    (beta-binomial); `graded` maps (right, graded) to how many probes had it."""
    seen = {key: n for key, n in graded.items() if key[1] > 0}
    if not seen:
        return (1.0, 1.0)

    a, b = np.meshgrid(_GRID, _GRID, indexing="ij")
    likelihood = np.zeros_like(a)
    for (k, total), n in sorted(seen.items()):
        likelihood += n * (betaln(a + k, b + total - k) - betaln(a, b))
    i, j = np.unravel_index(int(np.argmax(likelihood)), likelihood.shape)
    return (_GRID[i], _GRID[j])


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def record_caps(records: RecordsConfig) -> dict[str, float]:
    """The per-problem caps of each table (inf: none)."""
    top_k = records.gates.sft_top_k
    pairs = float(records.max_pairs_per_problem)
    return {"sft": float(top_k) if top_k else math.inf, "dpo": pairs, "step_dpo": pairs}


@dataclass(slots=True)
class NightAllocator:
    """Second-tree budgets window by window; state: what earlier windows left and saw."""

    config: AllocationConfig
    budget: int  # the night's B per problem: T = problems x budget
    records: RecordsConfig = field(default_factory=RecordsConfig)
    carry: float = 0.0
    probe_spent: float = 0.0  # every probe so far
    probe_answers: int = 0
    graded: Counter[tuple[int, int]] = field(default_factory=Counter)  # (right, graded) -> probes
    value_given: float = 0.0  # expected weighted rows of every second tree so far
    tokens_given: int = 0  # and their budgets

    @property
    def probe_budget(self) -> int:
        return max(1, math.floor(self.config.probe_fraction * self.budget))

    def allocate(self, outcomes: Sequence[ProbeOutcome], *, last: bool = False) -> WindowPlan:
        """The second-tree budgets of one window, given its committed probes in order;
        `last`: the night's last window (nothing is held back for later)."""
        config, budget = self.config, self.budget
        for o in outcomes:
            if not 0 <= o.spent <= self.probe_budget:
                raise ValueError(
                    f"probe of {o.problem_id} spent {o.spent}, its B is {self.probe_budget}"
                )
        pool = self.carry + sum(budget - o.spent for o in outcomes)
        self.probe_spent += sum(o.spent for o in outcomes)
        self.probe_answers += sum(o.answered for o in outcomes)
        self.graded.update((o.correct, o.correct + o.incorrect) for o in outcomes)
        prior = config.prior or fit_prior(self.graded)
        # no answer yet in the whole night: assume the probe's B buys one
        per_answer = (
            self.probe_spent / self.probe_answers if self.probe_answers else self.probe_budget
        )
        per_answer = max(per_answer, 1.0)
        # each problem's own answers per token, shrunk toward the night's by one answer's
        # worth: a probe that answered nothing needed more than its B for one answer
        rates = [(o.answered + 1) / (o.spent + per_answer) for o in outcomes]
        step = max(1, math.floor(config.step_fraction * budget))
        smallest = max(step, math.ceil(config.min_tree_fraction * budget))
        most = [max(0, math.floor(config.max_multiple * budget - o.spent)) for o in outcomes]
        given = [0] * len(outcomes)
        floor_total = max(0.0, config.min_fraction - config.probe_fraction) * budget
        if floor_total > 0:
            for i, o in enumerate(outcomes):
                given[i] = min(
                    most[i], max(smallest, math.floor(config.min_fraction * budget - o.spent))
                )
        left = pool - sum(given)
        if left < 0:  # cannot happen when min_fraction <= 1 (each share covers it); stay safe
            given, left = [0] * len(outcomes), pool
        caps = record_caps(self.records)
        value: list[dict[int, float]] = [{} for _ in outcomes]  # problem -> {B: worth}

        def worth(i: int, b: int) -> float:
            if b not in value[i]:
                value[i][b] = expected_rows(outcomes[i], b * rates[i], config, caps, prior)
            return value[i][b]

        def best_step(i: int) -> tuple[float, int]:
            """(gain per token, new B) of problem i's best increase within what is left."""
            now = given[i]
            base = worth(i, now) if now else 0.0
            found = (0.0, now)
            b = now + (smallest if now == 0 else step)
            while b <= min(most[i], now + left):
                rate = (worth(i, b) - base) / (b - now)
                if rate > found[0] + 1e-12:
                    found = (rate, b)
                b += step
            return found

        offers = [best_step(i) for i in range(len(outcomes))]
        floor = 0.0  # the least gain per token worth giving now
        if not last and self.tokens_given > 0:
            floor = config.hold_below * self.value_given / self.tokens_given
        while True:
            # the best gain per token; ties to the earlier problem (deterministic)
            pick = max(range(len(offers)), key=lambda k: (offers[k][0], -k), default=None)
            if pick is None or offers[pick][0] <= 0 or offers[pick][0] < floor:
                break
            left -= offers[pick][1] - given[pick]
            given[pick] = offers[pick][1]
            offers = [
                best_step(k) if k == pick or offers[k][1] - given[k] > left else offers[k]
                for k in range(len(offers))
            ]
        self.carry = left
        self.value_given += sum(worth(i, b) for i, b in enumerate(given) if b)
        self.tokens_given += sum(given)
        return WindowPlan(tuple(given), pool, left, per_answer, prior)


def plan_lines(config: AllocationConfig, budget: int, problems: int) -> list[tuple[str, str]]:
    """What `--dry-run` says of an enabled allocator for a night of `problems` at `budget`:
    the probe's B, the night's total and its windows."""
    probe = max(1, math.floor(config.probe_fraction * budget))
    windows = math.ceil(problems / config.window) if problems else 0
    return [
        (
            "night allocator",
            f"on: a probe tree per problem at B={probe:,} (probe_fraction "
            f"{config.probe_fraction:g} x {budget:,}), then second trees from what is left",
        ),
        (
            "the night's total",
            f"{problems * budget:,} cost units ({problems} problems x B={budget:,}); probes "
            f"and second trees together never spend more",
        ),
        (
            "allocation windows",
            f"{windows} of up to {config.window} problems in source order; a problem's two "
            f"trees hold at most {config.max_multiple:g} x B, at least "
            f"{config.min_fraction:g} x B",
        ),
    ]


__all__ = [
    "AllocationConfig",
    "NightAllocator",
    "ProbeOutcome",
    "TableWeights",
    "WindowPlan",
    "expected_rows",
    "fit_prior",
    "plan_lines",
    "record_caps",
]
