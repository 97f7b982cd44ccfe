"""The real-run half of the benchmark, as the figures `__main__` prints.

`pipeline_runs.measure_real` does the work (SmolLM2 runs through the pipeline, the one-pass
PRM trained on the train problems' trees, every step valued on held-out trees); this
module turns its runs into the step AUCs, the cost per policy token, the scorer's
CPU-seconds per node and the yield of BG-MCTS over repeated sampling, per scorer kind.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.scorer_value.auc import CurvePoint, StepAUC
from benchmarks.scorer_value.pipeline_runs import (
    METHODS,
    REAL_FULL,
    REAL_QUICK,
    SCORERS,
    RealResult,
    RunData,
    measure_real,
)
from search.scorer_kinds import GENPRM, ONE_PASS

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RealRuns:
    """What the real runs measure (None: not measured, the simulated value is printed)."""

    step_auc_genprm: StepAUC  # GenPRM's step values on held-out trees' labelled steps
    step_auc_one_pass: StepAUC  # the trained one-pass PRM's, on the same steps
    # PRM tokens the engine computed (input + output) per policy output token, BG-MCTS
    prm_tokens_per_policy_token_genprm: float | None = None
    prm_tokens_per_policy_token_one_pass: float | None = None
    learning_curve: tuple[CurvePoint, ...] = ()  # one-pass AUC against training rows
    # BG-MCTS's correct trajectories per 1k total tokens over repeated sampling's
    yield_ratio_vs_rs: dict[str, float] = field(default_factory=dict)
    table: str = ""  # the runs as a markdown table


def ratio(result: RealResult, kind: str) -> float:
    """BG-MCTS's yield over repeated sampling's, both scoring with `kind`."""
    bg = result.runs[f"heldout-bg_mcts-{kind}"].per_1k_total("correct_trajectories")
    rs = result.runs[f"heldout-repeated_sampling-{kind}"].per_1k_total("correct_trajectories")
    return math.nan if rs == 0 else bg / rs


def _row(name: str, run: RunData) -> str:
    per_node = (run.scorer_cpu_s or 0.0) / max(run.nodes, 1)
    return (
        f"| {name} | {len(run.trees)} | {run.nodes} | {run.policy_tokens:,} | "
        f"{run.total('prm_input_tokens'):,} / {run.total('prm_output_tokens'):,} | "
        f"{run.prm_tokens / max(run.policy_tokens, 1):.2f} | {per_node:.3f} | "
        f"{run.total('correct_trajectories')} ({run.per_1k_total('correct_trajectories'):.3f}) | "
        f"{run.total('dpo_pairs')} ({run.per_1k_total('dpo_pairs'):.3f}) | "
        f"{run.total('step_pairs')} ({run.per_1k_total('step_pairs'):.3f}) | "
        f"{run.wall_s or 0:.0f} |"
    )


def runs_markdown(result: RealResult) -> str:
    lines = [
        "| run (problems-method-scorer) | trees | nodes | policy out tok | PRM in / out tok | "
        "PRM tok / policy tok | scorer CPU s / node | correct traj. (/1k tot) | "
        "DPO pairs (/1k tot) | step pairs (/1k tot) | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(name, run) for name, run in result.runs.items()]
    return "\n".join(lines)


def real_runs(args: argparse.Namespace) -> RealRuns:
    """The real half in `args.work` (resumed there), as the printed figures."""
    mode = REAL_QUICK if args.quick else REAL_FULL
    work = args.work or REPO / "out" / "bench-scorer-value" / ("quick" if args.quick else "full")
    result = measure_real(mode, Path(work))

    def cost(kind: str) -> float:
        run = result.runs[f"heldout-bg_mcts-{kind}"]
        return run.prm_tokens / max(run.policy_tokens, 1)

    return RealRuns(
        step_auc_genprm=result.auc[GENPRM],
        step_auc_one_pass=result.auc[ONE_PASS],
        prm_tokens_per_policy_token_genprm=cost(GENPRM),
        prm_tokens_per_policy_token_one_pass=cost(ONE_PASS),
        learning_curve=tuple(result.curve),
        yield_ratio_vs_rs={kind: ratio(result, kind) for kind in SCORERS},
        table=runs_markdown(result),
    )


__all__ = ["METHODS", "RealRuns", "real_runs", "runs_markdown"]
