"""Data yield of one graded search: how much training data its tokens bought.

Four counts, each from the rows the synthesis run writes its tables with (the same
builders and quality gates, `records.gates`), so an evaluation grid and a synthesis run
measure the same thing:

* ``correct_trajectories`` - distinct correct trajectories that pass the gates (the
  `sft` candidates, before the per-problem cap ``gates.sft_top_k``: the cap is a choice
  of the export, not a property of the search);
* ``dpo_pairs`` - `dpo` rows (pairs that pass the gates, at most
  ``max_pairs_per_problem``);
* ``step_pairs`` - `step_dpo` rows (step-level pairs, same cap);
* ``prm_steps`` - steps of the `prm` rows that end in an answer, every one with a value
  known from the answers below it (paths that never answered are left out: their steps
  would carry only the PRM's own opinion, ``prm.unanswered_branches``).

`counts` reads them off rows already built (`records_for` builds every table once);
`yield_counts` builds the four it needs for a search that writes no tables (an
evaluation grid).  The report divides their sums by the tokens spent (per 1,000 policy
output tokens, and per 1,000 policy output + PRM input + PRM output tokens).
"""

from __future__ import annotations

from pipeline.records.config import RecordsConfig
from pipeline.records.context import BuildContext, Built
from pipeline.records.dpo import dpo_rows
from pipeline.records.grading import GradedTree
from pipeline.records.paths import GatedPaths
from pipeline.records.prm import prm_rows
from pipeline.records.schema import NO_YIELD, YIELD_COUNTS, YIELD_FIELDS
from pipeline.records.sft import sft_candidates
from pipeline.records.step_dpo import step_dpo_rows


def counts(sft_candidates: Built, dpo: Built, step_dpo: Built, prm: Built) -> dict[str, int]:
    """The four counts from one problem's built rows (`sft_candidates`: before the cap)."""
    return {
        "correct_trajectories": len(sft_candidates.rows),
        "dpo_pairs": len(dpo.rows),
        "step_pairs": len(step_dpo.rows),
        "prm_steps": sum(len(r["labels"]) for r in prm.rows if r["ends_in_answer"]),
    }


def yield_counts(graded: GradedTree, config: RecordsConfig | None = None) -> dict[str, int]:
    """The four counts of `graded` under `config` (default `RecordsConfig()`)."""
    context = BuildContext(config or RecordsConfig())
    paths = GatedPaths(graded, context.config)  # judged once for the four builders
    return counts(
        sft_candidates(graded, context, paths),
        dpo_rows(graded, context, paths),
        step_dpo_rows(graded, context, paths),
        prm_rows(graded, context, paths),
    )


__all__ = ["NO_YIELD", "YIELD_COUNTS", "YIELD_FIELDS", "counts", "yield_counts"]
