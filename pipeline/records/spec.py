"""`RecordsSpec`: what a tree's records are built with besides its search result and its
reference: the problem, the run, the records config, the model names, the benchmark the
problem overlaps, the policy's prompt and how the search read answers.

One object instead of the same keywords at every entry (`records_for`, and the night
allocator's `probe_records` and `second_records`), so a run says once how its trees
become rows, and a second tree can be built under the same spec with the caps lifted
(`dataclasses.replace` of its `config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.prompts import POLICY_INSTRUCTION
from pipeline.records.config import RecordsConfig
from pipeline.records.context import BuildContext
from pipeline.records.grading import GradedTree, grade_for_records
from search.answers import AnswerExtraction
from search.driver import SearchResult


@dataclass(frozen=True, slots=True)
class RecordsSpec:
    """How one problem's tree is graded and turned into rows.

    `instruction` is the policy's user-turn template (its `prompts.policy_instruction`):
    the training prompt when `records.prompt.search_prompt` asks for it, else
    `records.prompt.template` is.  `extraction` is the search's `answer_extraction`
    (training texts end after the statement it read).  `contamination` names the
    benchmark the problem overlaps (`pipeline.problems.decontamination`): the tree is
    still recorded (`nodes`, `trees`, `tree_nodes`), but it gives no training rows.
    """

    problem_id: str
    run_id: str
    config: RecordsConfig = field(default_factory=RecordsConfig)
    policy_model: str | None = None
    prm_model: str | None = None
    contamination: str | None = None
    instruction: str = POLICY_INSTRUCTION
    extraction: AnswerExtraction = AnswerExtraction.BOXED

    @property
    def context(self) -> BuildContext:
        """What every row builder takes: the config, the run id and the model names."""
        return BuildContext(self.config, self.run_id, self.policy_model, self.prm_model)

    async def grade(self, result: SearchResult, reference: str | None) -> GradedTree:
        """`result` graded under this spec's config, prompt and answer extraction."""
        return await grade_for_records(
            result,
            reference,
            problem_id=self.problem_id,
            config=self.config,
            instruction=self.instruction,
            extraction=self.extraction,
        )


__all__ = ["RecordsSpec"]
