"""Data yield of one graded search: how much training data its tokens bought.

Four counts, each from the same builders and quality gates (`records.gates`) the
synthesis run writes its tables with, so an evaluation grid and a synthesis run
measure the same thing:

* ``correct_trajectories`` - distinct correct trajectories that pass the gates (the
  `sft` builder without its per-problem cap ``gates.sft_top_k``: the cap is a choice
  of the export, not a property of the search);
* ``dpo_pairs`` - `dpo` rows (pairs that pass the gates, at most
  ``max_pairs_per_problem``);
* ``step_pairs`` - `step_dpo` rows (step-level pairs, same cap);
* ``prm_steps`` - steps of the `prm` rows, every one with a value known from the
  answers below it (paths that never answered are left out: their steps would carry
  only the PRM's own opinion, ``prm.unanswered_branches``).

The report divides their sums by the tokens spent (per 1,000 policy output tokens, and
per 1,000 policy output + PRM input + PRM output tokens).
"""

from __future__ import annotations

from pipeline.records.config import RecordsConfig
from pipeline.records.dpo import dpo_rows
from pipeline.records.grading import GradedTree
from pipeline.records.prm import prm_rows
from pipeline.records.schema import NO_YIELD, YIELD_COUNTS, YIELD_FIELDS
from pipeline.records.sft import sft_rows
from pipeline.records.step_dpo import step_dpo_rows


def yield_counts(graded: GradedTree, config: RecordsConfig | None = None) -> dict[str, int]:
    """The four counts of `graded` under `config` (default `RecordsConfig()`)."""
    config = config or RecordsConfig()
    gates = config.gates
    correction = config.sft.self_correction
    uncapped = gates.model_copy(update={"sft_top_k": 0})
    sft = sft_rows(
        graded,
        run_id="",
        min_score=config.min_sft_score,
        dedupe=config.dedupe,
        self_correction=correction,
        gates=uncapped,
    )
    dpo = dpo_rows(
        graded,
        run_id="",
        max_pairs_per_problem=config.max_pairs_per_problem,
        pairing=config.pairing,
        seed=config.seed,
        pair_types=config.dpo.pair_types,
        gates=gates,
        self_correction=correction,
    )
    steps = step_dpo_rows(
        graded,
        run_id="",
        max_pairs_per_problem=config.max_pairs_per_problem,
        gates=gates,
        self_correction=correction,
    )
    prm = prm_rows(
        graded,
        run_id="",
        dedupe=config.dedupe,
        config=config.prm.model_copy(update={"unanswered_branches": False}),
        gates=gates,
        threshold=config.pseudo_threshold,
        self_correction=correction,
    )
    return {
        "correct_trajectories": len(sft),
        "dpo_pairs": len(dpo),
        "step_pairs": len(steps),
        "prm_steps": sum(len(r["labels"]) for r in prm),
    }


__all__ = ["NO_YIELD", "YIELD_COUNTS", "YIELD_FIELDS", "yield_counts"]
