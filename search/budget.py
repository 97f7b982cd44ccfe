"""Token budget B, the budget sufficiency ratio rho (Eq. 2) and the token weights.

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
    """Fixed per-problem budget B and the running cost C_used.

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

    def __post_init__(self) -> None:
        if not math.isfinite(self.total) or self.total <= 0:
            raise ValueError(f"budget must be a positive number of tokens, got {self.total!r}")

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
        score_reserve: float = 0.0,
    ) -> int:
        """Largest per-choice `max_tokens` such that n choices can never overspend.

        `inserted_tokens` is the fixed text the search adds (charged as output),
        `input_tokens` the request's prompt (charged once per request) and
        `score_reserve` what scoring the n children may cost at most.  Returns 0
        when not even one token per choice fits.
        """
        if n < 1 or cap < 1:
            return 0
        fixed = (
            inserted_tokens * self.cost.policy_output
            + input_tokens * self.cost.policy_input
            + score_reserve
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

    def charge_generation(
        self, *, output_tokens: int, input_tokens: int, inserted_tokens: int
    ) -> None:
        self._charge(
            output_tokens * self.cost.policy_output
            + input_tokens * self.cost.policy_input
            + inserted_tokens * self.cost.policy_output,
            "policy request",
        )
        self.tokens.policy_output += output_tokens
        self.tokens.policy_input += input_tokens
        self.tokens.inserted_prompt += inserted_tokens

    def score_cost(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens * self.cost.prm_input + output_tokens * self.cost.prm_output

    def charge_score(self, *, input_tokens: int, output_tokens: int) -> None:
        cost = self.cost  # self.score_cost(input_tokens, output_tokens), inlined
        self._charge(input_tokens * cost.prm_input + output_tokens * cost.prm_output, "scoring")
        self.tokens.prm_input += input_tokens
        self.tokens.prm_output += output_tokens


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
