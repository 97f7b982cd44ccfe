"""Step values from a pooling model's per-token class logits, shared by the vLLM engines.

Both vLLM engines (in-process and the `/pooling` endpoint) ask for the raw logits of
every token (`token_classify` without its activation) and read them here at the
separators themselves.  Raw logits, not vLLM's probabilities: vLLM picks its activation
from the model config (softmax, sigmoid, or none for a `problem_type` of "regression"),
while a PRM's value is by its training the softmax probability of class 1 ("good step"),
as Qwen2.5-Math-PRM's model card computes it and TRL's token-classification labels mean.
A one-label head (a regression-style reward) is read through a sigmoid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from actors.engines.base import StepValues


def positive_probability(logits: Sequence[float]) -> float:
    """The softmax probability of class 1 (a sigmoid for a one-label head)."""
    if len(logits) == 1:
        return 1.0 / (1.0 + math.exp(-float(logits[0])))
    top = max(float(x) for x in logits)
    weights = [math.exp(float(x) - top) for x in logits]
    return weights[1] / sum(weights)


def values_at(
    rows: Sequence[Sequence[float]],
    positions: Sequence[int],
    input_tokens: int,
    cached_tokens: int = 0,
    *,
    source: str,
) -> StepValues:
    """Each step's value from `rows` (one row of class logits per input token), read at the
    separator `positions`; an error StepValues when the rows do not cover the sequence
    (a pooler that left tokens out: its positions would be another token's)."""
    if len(rows) != input_tokens:
        return StepValues(
            (),
            input_tokens,
            cached_tokens,
            error=f"{source} returned {len(rows)} rows for {input_tokens} tokens; a one-pass "
            "PRM needs one per token: vLLM's pooler must be ALL, not STEP (start the server "
            'with --pooler-config \'{"tok_pooling_type": "ALL"}\')',
        )
    if rows and not len(rows[0]):
        return StepValues((), input_tokens, cached_tokens, error=f"{source} returned no labels")
    return StepValues(
        tuple(positive_probability(rows[p]) for p in positions), input_tokens, cached_tokens
    )


__all__ = ["positive_probability", "values_at"]
