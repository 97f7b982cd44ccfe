"""Reference-answer rollouts as a `search.Scorer` (the paper's physics protocol, Sec. 4.3).

No reward model judges partial physics solutions, so Q of a new non-terminal
node is the fraction of n = 5 full rollouts from the node (sampled with the
policy) whose final answer matches the problem's reference answer.  A node
that already holds an answer gets a binary reward: 1.0 when it matches, else
0.0.  (Because the two kinds of score are not comparable, the paper picks the
final answer by majority vote in this setting: `answer_rule: majority`.)

Answers are compared with math-verify through `actors.grading` (each comparison
bounded: untrusted LaTeX can take sympy forever).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from actors.grading import answers_match
from actors.redact import redact_text
from search import derive_seed
from search.answers import extract_boxed
from search.protocols import (
    FinishReason,
    Generation,
    GenerationRequest,
    Policy,
    Score,
    ScoreRequest,
)

References = Mapping[str, str] | Callable[[str], str | None]


class RolloutScorer:
    """Q(x) = matching rollouts / n, or a binary reward for an answered node.

    * Rollouts are one policy request of `n` full generations (no stop string,
      at most `max_tokens` each) continuing the node's assistant text
      (`response_prefix` plus the path), with a seed derived from the scorer's
      seed, the problem and the path.  A rollout's answer is its last
      `\\boxed{...}`; a rollout without one, or one that failed, is no match.
      Q is always divided by `n`; when every rollout failed the score is an error.
    * `references` maps a problem to its reference answer (a mapping or a
      callable); a problem without one is a score error.
    * The paper does not charge rollout tokens to the budget: by default the
      returned Score reports 0 tokens.  With `charge_rollouts=True` they are
      reported as the score's tokens, which the driver weights with the PRM cost
      weights (and checks against its PRM reserve, so size `max_tokens` to fit).
      Either way `rollout_tokens` (generated), `rollout_input_tokens` (prompt)
      and `rollout_requests` count every rollout, charged or not, for reporting.
    """

    def __init__(
        self,
        policy: Policy,
        references: References,
        *,
        n: int = 5,
        max_tokens: int = 1024,
        temperature: float = 0.8,
        charge_rollouts: bool = False,
        match_timeout_s: float = 5.0,
        response_prefix: str = "Step 1:",
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.policy = policy
        self.references = references
        self.n = n
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.charge_rollouts = charge_rollouts
        self.match_timeout_s = match_timeout_s
        self.response_prefix = response_prefix
        self.seed = seed
        self.name = name or f"rollout:{policy.name}"
        self.rollout_tokens = 0
        self.rollout_input_tokens = 0
        self.rollout_requests = 0

    def reference(self, problem: str) -> str | None:
        if callable(self.references):
            return self.references(problem)
        return self.references.get(problem)

    async def score(self, request: ScoreRequest) -> Score:
        reference = self.reference(request.problem)
        if reference is None:
            return Score(0.0, error="rollout scorer: no reference answer for this problem")
        if request.answered:
            matched = await answers_match(request.answer, reference, self.match_timeout_s)
            return Score(1.0 if matched else 0.0)
        try:
            rollouts = list(await self.policy.generate(self._request(request)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return Score(
                0.0, error=redact_text(f"rollout request failed: {type(exc).__name__}: {exc}")
            )
        output_tokens = sum(g.output_tokens for g in rollouts)
        input_tokens = sum(g.input_tokens for g in rollouts)
        self.rollout_requests += 1
        self.rollout_tokens += output_tokens
        self.rollout_input_tokens += input_tokens
        charged: dict[str, Any] = (
            {"input_tokens": input_tokens, "output_tokens": output_tokens}
            if self.charge_rollouts
            else {}
        )
        usable = [g for g in rollouts if g.finish is not FinishReason.ERROR]
        if not usable:
            errors = {g.error for g in rollouts if g.error} or {"no rollouts returned"}
            return Score(0.0, error="every rollout failed: " + "; ".join(sorted(errors)), **charged)
        matches = await asyncio.gather(*(self._matches(g, reference) for g in usable))
        return Score(sum(matches) / self.n, **charged)

    def _request(self, request: ScoreRequest) -> GenerationRequest:
        return GenerationRequest(
            problem=request.problem,
            assistant_prefix=self.response_prefix + "".join(request.path),
            n=self.n,
            max_tokens=self.max_tokens,
            stop=(),
            temperature=self.temperature,
            seed=derive_seed(self.seed, request.problem, request.path),
        )

    async def _matches(self, rollout: Generation, reference: str) -> bool:
        return await answers_match(extract_boxed(rollout.text), reference, self.match_timeout_s)


__all__ = ["RolloutScorer", "answers_match"]
