"""`records_for`: one search result graded and turned into every record type's rows.

Decontamination
    `records_for` takes the benchmark a problem overlaps (found by
    `pipeline.problems.decontamination`): such a problem keeps its nodes, trees and
    tree_nodes rows (``trees.contaminated`` names the benchmark) and gives no
    sft, dpo, prm or kto rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from actors.grading import counting
from actors.prompts import POLICY_INSTRUCTION
from pipeline.records.config import RecordsConfig
from pipeline.records.dpo import dpo_rows
from pipeline.records.grading import grade_result
from pipeline.records.kto import kto_rows
from pipeline.records.nodes import node_rows
from pipeline.records.prm import prm_rows
from pipeline.records.schema import Row
from pipeline.records.sft import sft_rows
from pipeline.records.splits import split_of
from pipeline.records.step_dpo import step_dpo_rows
from pipeline.records.tree_nodes import tree_node_rows
from pipeline.records.trees import tree_row
from pipeline.records.yields import NO_YIELD, yield_counts
from search.answers import AnswerExtraction
from search.driver import SearchResult


async def records_for(
    result: SearchResult,
    reference: str | None,
    *,
    problem_id: str,
    run_id: str,
    config: RecordsConfig | None = None,
    policy_model: str | None = None,
    prm_model: str | None = None,
    contamination: str | None = None,
    instruction: str = POLICY_INSTRUCTION,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
) -> dict[str, list[Row]]:
    """Grade one result and build every record type's rows with `config`.

    `instruction` is the policy's user-turn template (its `prompts.policy_instruction`):
    the training prompt when `records.prompt.search_prompt` asks for it, else
    `records.prompt.template` is.  `extraction` is the search's `answer_extraction`
    (training texts end after the statement it read).

    `contamination` names the benchmark the problem overlaps
    (`pipeline.problems.decontamination`): the tree is still recorded (`nodes`, `trees`,
    `tree_nodes`), but it gives no training rows (`sft`, `dpo`, `prm`, `kto`).
    """
    config = config or RecordsConfig()
    with counting() as grading:
        graded = await grade_result(
            result,
            reference,
            problem_id=problem_id,
            timeout_s=config.grade_timeout_s,
            pseudo_label=config.pseudo_label,
            threshold=config.pseudo_threshold,
            extraction=extraction,
            fold_blank_lines=config.fold_blank_lines,
        )
    template = instruction if config.prompt.search_prompt else config.prompt.template
    graded = replace(
        graded,
        grade_timeouts=grading.timeouts,
        instruction=instruction,
        prompt=template.format(problem=result.problem),
        split=split_of(problem_id, config.test_fraction),
    )
    models = {"policy_model": policy_model, "prm_model": prm_model}
    records: dict[str, list[Row]] = {
        "nodes": node_rows(graded, run_id=run_id, **models),
        "tree_nodes": tree_node_rows(graded, run_id=run_id),
    }
    drops: Counter[str] = Counter()
    if contamination is None:
        gates = config.gates
        records["sft"] = sft_rows(
            graded,
            run_id=run_id,
            min_score=config.min_sft_score,
            dedupe=config.dedupe,
            self_correction=config.sft.self_correction,
            gates=gates,
            drops=drops,
        )
        records["dpo"] = dpo_rows(
            graded,
            run_id=run_id,
            max_pairs_per_problem=config.max_pairs_per_problem,
            pairing=config.pairing,
            seed=config.seed,
            pair_types=config.dpo.pair_types,
            gates=gates,
            self_correction=config.sft.self_correction,
            drops=drops,
        )
        records["step_dpo"] = step_dpo_rows(
            graded,
            run_id=run_id,
            max_pairs_per_problem=config.max_pairs_per_problem,
            gates=gates,
            self_correction=config.sft.self_correction,
            drops=drops,
        )
        records["prm"] = prm_rows(
            graded,
            run_id=run_id,
            dedupe=config.dedupe,
            config=config.prm,
            gates=gates,
            threshold=config.pseudo_threshold,
            self_correction=config.sft.self_correction,
            drops=drops,
        )
        records["kto"] = kto_rows(
            graded,
            run_id=run_id,
            dedupe=config.dedupe,
            self_correction=config.sft.self_correction,
            gates=gates,
            drops=drops,
        )
    yields = NO_YIELD if contamination is not None else yield_counts(graded, config)
    records["trees"] = [
        tree_row(
            graded,
            run_id=run_id,
            contaminated=contamination,
            gate_drops=drops,
            yields=yields,
            **models,
        )
    ]
    return records


__all__ = ["records_for"]
