"""The `records:` section of the run config: grading and the training exports' knobs."""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from actors.prompts import check_problem_template
from pipeline.problems.decontamination import DecontaminationConfig
from pipeline.records.tree_paths import PairType
from search.strict_config import StrictConfig

# The grading limit, the same field in the records and in the evaluation configs.
GradeTimeout = Annotated[
    float,
    Field(
        gt=0,
        description="math-verify time per comparison; a tree's comparisons all end within it "
        "plus 1.5 s for the grading pool's start (`common.grading`), else they count as "
        "timeouts and their answers are left ungraded (unknown, never labelled incorrect)",
    ),
]

PseudoLabel = Literal["prm_threshold", "majority"]
Pairing = Literal["shared_prefix", "best_vs_worst", "random"]
SelfCorrection = Literal["exclude", "include", "only"]


class DpoConfig(StrictConfig):
    """Which kinds of pairs the DPO builder may make."""

    pair_types: tuple[PairType, ...] = Field(
        ("siblings", "cousins", "root"),
        min_length=1,
        description="allowed pair types; add `prefix` to keep pairs where one trajectory "
        "extends the other",
    )


class PrmConfig(StrictConfig):
    """The `prm` record: its step separator and which paths become rows."""

    pseudo_labels: bool = Field(
        False,
        description="without a reference, label steps from the pseudo labels (off: no prm rows, "
        "since prm_threshold pseudo labels are the PRM's own scores)",
    )
    separator: Literal["\n"] = Field(
        "\n",
        description="what joins a row's steps back into its trajectory (TRL's PRM default); "
        "a step is one line of the trajectory, so no step contains it",
    )
    unanswered_branches: bool = Field(
        False,
        description="also a row for every scored path that never reached an answer, its "
        "steps without an answer below labelled from the PRM's own Q (>= pseudo_threshold); "
        "off by default for the reason pseudo_labels is",
    )


class TrainingPromptConfig(StrictConfig):
    """The user turn of every training row (sft, dpo, kto, prm, step_dpo)."""

    template: str = Field(
        "{problem}",
        description="the training prompt, a template whose only field is {problem} (literal "
        "braces doubled); default: the bare problem",
    )
    search_prompt: bool = Field(
        False,
        description="use the policy's own prompt (policy.prompts.policy_instruction, e.g. a "
        "few-shot scaffold) instead of `template`",
    )

    @model_validator(mode="after")
    def _check_template(self) -> TrainingPromptConfig:
        check_problem_template(self.template, "template")
        return self


class GatesConfig(StrictConfig):
    """Quality gates of the training rows; each counts what it drops (`trees.gate_drops`)."""

    drop_truncated: bool = Field(
        True,
        description="no training row from a trajectory the token cap cut inside its answer "
        "sentence (`truncated`)",
    )
    require_statement: bool = Field(
        True,
        description="no training row from a trajectory that never states its answer (a box or "
        "'answer is'): answered only by its natural end, its answer is a guess at its last "
        "number",
    )
    rejected_states_reference: bool = Field(
        True,
        description="no DPO/step-DPO rejected and no KTO undesirable text that states the "
        "reference answer anywhere (it would teach against the right answer)",
    )
    min_edit_distance: int = Field(
        20,
        ge=0,
        description="DPO: chosen and rejected texts differ by at least this many characters "
        "(Levenshtein; rStar-Math: 20)",
    )
    min_q_margin: float | None = Field(
        None,
        ge=0,
        le=1,
        description="DPO/step-DPO: Q(chosen) - Q(rejected) at least this; null: no margin",
    )
    sft_top_k: int = Field(
        2,
        ge=0,
        description="SFT rows per problem, the best by Q after near-duplicate removal "
        "(rStar-Math keeps 2); 0: every one",
    )
    near_duplicate: float = Field(
        0.9,
        gt=0,
        le=1,
        description="two trajectories whose normalised similarity (rapidfuzz ratio) is at "
        "least this are near duplicates (the better Q is kept); 1: exact copies only",
    )
    false_equation: bool = Field(
        True,
        description="process gate: no sft row, dpo/step-DPO chosen or desirable kto row from "
        "a correct path whose training text states a false equation (`7 - 9 = 1`: only "
        "`<arithmetic> = <number>` that provably does not hold, "
        "`pipeline.records.equations`); a right answer reached through a wrong step is not a "
        "good solution. The prm table keeps the path and labels that step and every later "
        "one bad instead (`prm.false_equation` counts the steps relabelled)",
    )
    min_step_value: float | None = Field(
        None,
        ge=0,
        le=1,
        description="process gate: no sft row, dpo/step-DPO chosen or desirable kto row from "
        "a correct path with a node (root aside) whose Q is below this; null: no gate. With "
        "the one-pass scorer and `scorer.one_pass.node_value: min` a node's Q is the lowest "
        "step score on its path so far, so this drops exactly the paths with a step the PRM "
        "scores below it, for tree nodes (one step) and whole solutions (repeated sampling) "
        "alike. Not applied to prm labels: a PRM trained on its own verdicts learns nothing new",
    )
    unpaired_from: Literal["all", "mixed"] = Field(
        "all",
        description="KTO rows from every problem, or only from `mixed` problems (both right "
        "and wrong answers in the tree); pairs always come from mixed problems",
    )


class RecordsConfig(StrictConfig):
    """Knobs of grading and of the training exports."""

    prompt: TrainingPromptConfig = Field(
        default_factory=TrainingPromptConfig,
        description="the user turn of every training row: the bare problem by default",
    )
    gates: GatesConfig = Field(
        default_factory=GatesConfig, description="quality gates of the training rows"
    )
    test_fraction: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="share of problems held out as the `test` split (hashed on the problem "
        "id: the same problem is in the same split in every table and every run)",
    )
    fold_blank_lines: bool = Field(
        True,
        description="training texts fold blank lines into one line break, so a step (a line) "
        "is never empty; tree_nodes and nodes keep the raw text",
    )

    min_sft_score: float = Field(
        0.0, ge=0, le=1, description="SFT keeps correct nodes with Q at least this"
    )
    dedupe: bool = Field(True, description="drop identical trajectories (keep the best Q)")
    max_pairs_per_problem: int = Field(4, ge=0, description="DPO pairs per problem, at most")
    pairing: Pairing = Field("shared_prefix", description="DPO pairing rule")
    seed: int = Field(0, description="seed of the `random` pairing rule")
    pseudo_label: PseudoLabel = Field(
        "prm_threshold", description="how nodes are labelled when a problem has no reference"
    )
    pseudo_threshold: float = Field(
        0.5, ge=0, le=1, description="prm_threshold: answered nodes with Q >= this are correct"
    )
    grade_timeout_s: GradeTimeout = 5.0
    self_correction: SelfCorrection = Field(
        "exclude",
        description="paths that answered before their last node (or whose text states more "
        "than one answer), in every training table (sft, dpo, step_dpo, prm, kto): exclude "
        "(clean paths only), include, or only those (was records.sft.self_correction, "
        "still read with a warning)",
    )
    dpo: DpoConfig = Field(default_factory=DpoConfig, description="the dpo record's pairs")
    prm: PrmConfig = Field(default_factory=PrmConfig, description="the prm record's labels")
    decontamination: DecontaminationConfig = Field(
        default_factory=DecontaminationConfig,
        description="n-gram overlap check of the problems against benchmark test sets",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved_self_correction(cls, data: Any) -> Any:
        """The old key ``records.sft.self_correction`` still works, with a warning: the rule
        governs all five training tables, not sft alone, so it moved up a level."""
        if not isinstance(data, dict) or "sft" not in data:
            return data
        data = dict(data)
        sft = data.pop("sft")
        if not isinstance(sft, dict) or set(sft) - {"self_correction"}:
            raise ValueError(
                "records.sft: only the deprecated key self_correction is allowed here "
                "(use records.self_correction)"
            )
        if "self_correction" in sft:
            if "self_correction" in data and data["self_correction"] != sft["self_correction"]:
                raise ValueError(
                    "records.sft.self_correction and records.self_correction disagree: keep "
                    "records.self_correction only"
                )
            warnings.warn(
                "records.sft.self_correction is deprecated: use records.self_correction (it "
                "governs every training table, not sft alone)",
                FutureWarning,
                stacklevel=2,
            )
            data["self_correction"] = sft["self_correction"]
        return data


__all__ = [
    "DpoConfig",
    "GatesConfig",
    "Pairing",
    "PrmConfig",
    "PseudoLabel",
    "RecordsConfig",
    "SelfCorrection",
    "TrainingPromptConfig",
]
