"""The real-run parts of the benchmark: SmolLM2 runs, PRM training, AUC on held-out trees.

Not written yet (they need the one-pass scorer and `bgmcts train-prm`): each function
below raises NotImplementedError, and `__main__` then prints `nan` for its lines with a
note.  What each must return is fixed here, so the table and the last lines need no
change when they are filled in.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.scorer_value.auc import CurvePoint, StepAUC


@dataclass(frozen=True)
class RealRuns:
    """What the real runs measure (None: not measured, the simulated value is printed)."""

    step_auc_genprm: StepAUC  # GenPRM's step values on held-out trees' labelled steps
    step_auc_one_pass: StepAUC  # the trained one-pass PRM's, on the same steps
    # PRM tokens (input + output) per policy output token of the real runs, if measured
    prm_tokens_per_policy_token_genprm: float | None = None
    prm_tokens_per_policy_token_one_pass: float | None = None
    learning_curve: tuple[CurvePoint, ...] = ()  # one-pass AUC against training rows


def real_runs(args: argparse.Namespace) -> RealRuns:
    """TODO(lead): the real-run parts, e.g.

    1. synthesize trees with SmolLM2 and GenPRM (`configs/local.yaml`-like, --quick
       smaller), keeping held-out problems apart;
    2. train the one-pass PRM on the train trees' `prm` rows (`bgmcts train-prm`), at a
       few row counts for `learning_curve` (auc.learning_curve: rows -> AUC);
    3. score the held-out trees' steps with GenPRM and the trained PRM; `auc.step_auc`
       of each against the steps' labels (value known from the answers below them);
    4. the runs' PRM tokens per policy token, from their `trees` tables.
    """
    raise NotImplementedError("the real-run parts (SmolLM2 runs, training, AUC) are the lead's")


__all__ = ["RealRuns", "real_runs"]
