"""Token budget B, the budget sufficiency ratio rho (Eq. 2) and the token weights.

`Budget` is the one place the search's cost C_used and its token counters change: the
driver hands it what each request and each score used (`charge`), and it holds back what
pending expansions and their scores may still spend (`reserve`, `score_reserve`).

The paper charges only policy output tokens.  `TokenWeights` adds one weight per
token kind so that the paper's stated future work (budgets over input tokens
and reward-model computation) is a config change; the default weights
reproduce the paper exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from search.protocols import TokenCounts
from search.strict_config import StrictConfig


class BudgetViolation(RuntimeError):
    """A service reported more cost than the budget allowed it to spend."""


# Every token kind's weight: a price or cost, never negative, never infinite or NaN.
Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class TokenWeights(StrictConfig):
    """One weight per token kind: policy output, policy input, PRM input, PRM output.

    The one type for anything priced per token: the search's cost units (`search.cost`,
    `CostWeights`: defaults are the paper, output tokens only) and the run report's money
    per million tokens (`prices`, `PricesConfig`).
    """

    policy_output: Weight = Field(
        1.0, description="weight of one policy output token (cost units: 1 is the paper's budget)"
    )
    policy_input: Weight = Field(
        0.0,
        description="weight of one policy prompt token, counted per request; 0: prompts are "
        "free (the paper)",
    )
    prm_input: Weight = Field(
        0.0, description="weight of one PRM prompt token; 0: scoring is free (the paper)"
    )
    prm_output: Weight = Field(
        0.0, description="weight of one PRM generated token; 0: scoring is free (the paper)"
    )

    @property
    def charges_scoring(self) -> bool:
        return self.prm_input > 0 or self.prm_output > 0

    def cost_of(self, counts: TokenCounts) -> float:
        """Weighted sum of a search's token counts; the search adds the text it inserted
        (continuation prompts) to the policy's output, since it charges it as output."""
        return (
            counts.policy_output_tokens * self.policy_output
            + counts.policy_input_tokens * self.policy_input
            + counts.inserted_prompt_tokens * self.policy_output
            + counts.prm_input_tokens * self.prm_input
            + counts.prm_output_tokens * self.prm_output
        )

    def weigh(self, counts: Mapping[str, float]) -> float:
        """Weighted sum of token counts keyed `<kind>_tokens` (as the `trees` rows have them)."""
        return (
            counts["policy_output_tokens"] * self.policy_output
            + counts["policy_input_tokens"] * self.policy_input
            + counts["prm_input_tokens"] * self.prm_input
            + counts["prm_output_tokens"] * self.prm_output
        )


@dataclass(slots=True)
class Budget:
    """Fixed per-problem budget B, the running cost C_used and the token counters.

    Invariant: `used <= total` at all times; every request is sized by
    `max_tokens_per_choice` before it is sent.
    """

    total: float
    cost: TokenWeights = field(default_factory=TokenWeights)
    used: float = 0.0
    tokens: TokenCounts = field(default_factory=TokenCounts)
    # What pending expansions may still spend (`reserve`); always 0 with one in flight.
    reserved: float = 0.0
    open_reservations: int = 0
    # The most PRM prompt and generated tokens one score may use (`CostWeights.prm_reserve_*`).
    max_score_tokens: tuple[int, int] = (0, 0)
    _per_score: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not math.isfinite(self.total) or self.total <= 0:
            raise ValueError(f"budget must be a positive number of tokens, got {self.total!r}")
        # Held only while PRM tokens are charged: with the paper's weights scoring is free.
        if self.cost.charges_scoring:
            self._per_score = self.score_cost(*self.max_score_tokens)

    @property
    def remaining(self) -> float:
        """B - C_used less what pending expansions hold (`reserve`)."""
        return self.total - self.used - self.reserved

    @property
    def rho(self) -> float:
        """Budget sufficiency ratio rho = 1 - C_used / B (Eq. 2), in [0, 1]."""
        return min(1.0, max(0.0, 1.0 - self.used / self.total))

    @property
    def exhausted(self) -> bool:
        return self.remaining < min(1.0, self.cost.policy_output or 1.0)

    def max_tokens_per_choice(
        self,
        *,
        n: int,
        cap: int,
        inserted_tokens: int = 0,
        input_tokens: int = 0,
    ) -> int:
        """Largest per-choice `max_tokens` such that n choices can never overspend.

        `inserted_tokens` is the fixed text the search adds (charged as output),
        `input_tokens` the request's prompt (charged once per request); what scoring
        the n children may cost at most (`score_reserve`) is held back too.  Returns 0
        when not even one token per choice fits.
        """
        if n < 1 or cap < 1:
            return 0
        fixed = (
            inserted_tokens * self.cost.policy_output
            + input_tokens * self.cost.policy_input
            + self._per_score * n
        )
        spendable = self.remaining - fixed
        if spendable <= 0:
            return 0
        if self.cost.policy_output == 0:
            return cap
        return max(0, min(cap, math.floor(spendable / (n * self.cost.policy_output) + 1e-9)))

    def _charge(self, amount: float, what: str) -> None:
        if amount > self.total - self.used - self.reserved + 1e-9:  # self.remaining, inlined
            raise BudgetViolation(
                f"{what} costs {amount:g} but only {self.remaining:g} of B={self.total:g} is left"
            )
        self.used = min(self.total, self.used + amount)

    def reserve(self, amount: float) -> Reservation:
        """Hold `amount` for a pending expansion: C_used + reserved <= B stays true whatever
        the pending expansions spend, in whatever order they land (each spends at most
        what it holds: release first, then charge)."""
        if not amount >= 0:
            raise ValueError(f"a reservation must be >= 0, got {amount!r}")
        if amount > self.remaining + 1e-9:
            raise BudgetViolation(
                f"reserving {amount:g} but only {self.remaining:g} of B={self.total:g} is free"
            )
        self.reserved += amount
        self.open_reservations += 1
        return Reservation(self, amount)

    def _release(self, amount: float, closing: bool) -> None:
        self.reserved = max(0.0, self.reserved - amount)
        if closing:
            self.open_reservations -= 1
            if self.open_reservations == 0:
                self.reserved = 0.0  # no float residue once nothing is pending

    def charge(self, counts: TokenCounts, what: str) -> None:
        """C_used <- C_used + Delta C (Algorithm 1), Delta C being the weighted `counts` of
        one policy request or one score (`TokenCounts.of_request`, `of_score`), which are
        added to the search's counters.  Raises `BudgetViolation`, counting nothing, when
        Delta C is more than is left."""
        self._charge(self.cost.cost_of(counts), what)
        self.tokens.add(counts)

    def score_cost(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens * self.cost.prm_input + output_tokens * self.cost.prm_output

    def score_reserve(self, scores: int = 1) -> float:
        """What `scores` scores may cost at most (each `max_score_tokens` weighted), held
        from B before the expansion whose children they score is sent; 0 under the
        paper's budget, where C_used counts policy output tokens only (Sec. 3.1)."""
        return self._per_score * scores

    def count_policy_request(self) -> int:
        """Count one policy request as it is sent; returns how many were sent before it
        (the request's number in the search, which seeds it)."""
        sent = self.tokens.policy_requests
        self.tokens.policy_requests = sent + 1
        return sent

    def count_score_request(self) -> None:
        self.tokens.scorer_requests += 1

    def count_failures(self, *, generation: bool, score: bool) -> None:
        """Count a child whose generation or score failed (it is kept, marked)."""
        self.tokens.failed_generations += generation
        self.tokens.failed_scores += score


class Reservation:
    """One pending expansion's hold on the budget (`Budget.reserve`).

    `release(part)` gives back part of it (before charging what that part really cost);
    `close()` gives back whatever is left and is safe to call more than once, so a
    `finally` can always call it (failures and cancellations leave nothing behind).
    """

    __slots__ = ("budget", "closed", "left")

    def __init__(self, budget: Budget, amount: float) -> None:
        self.budget = budget
        self.left = amount
        self.closed = False

    def release(self, part: float) -> None:
        if self.closed:
            return
        part = min(max(part, 0.0), self.left)
        self.left -= part
        self.budget._release(part, closing=False)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        left, self.left = self.left, 0.0
        self.budget._release(left, closing=True)
