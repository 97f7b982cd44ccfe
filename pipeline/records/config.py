"""The `records:` section of the run config: grading and the training exports' knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.problems.decontamination import DecontaminationConfig
from pipeline.records.tree_paths import PairType

PseudoLabel = Literal["prm_threshold", "majority"]
Pairing = Literal["shared_prefix", "best_vs_worst", "random"]
SelfCorrection = Literal["exclude", "include", "only"]


class SftConfig(BaseModel):
    """Which correct trajectories become SFT rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    self_correction: SelfCorrection = Field(
        "exclude",
        description="paths that answered before their last node: exclude (clean paths only), "
        "include, or only those",
    )


class DpoConfig(BaseModel):
    """Which kinds of pairs the DPO builder may make."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair_types: tuple[PairType, ...] = Field(
        ("siblings", "cousins", "root"),
        min_length=1,
        description="allowed pair types; add `prefix` to keep pairs where one trajectory "
        "extends the other",
    )


class PrmConfig(BaseModel):
    """The `prm` record's behaviour without a reference answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pseudo_labels: bool = Field(
        False,
        description="without a reference, label steps from the pseudo labels (off: no prm rows, "
        "since prm_threshold pseudo labels are the PRM's own scores)",
    )


class RecordsConfig(BaseModel):
    """Knobs of grading and of the SFT / DPO exports."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    grade_timeout_s: float = Field(5.0, gt=0, description="math-verify time per comparison")
    sft: SftConfig = Field(default_factory=SftConfig, description="the sft record's rows")
    dpo: DpoConfig = Field(default_factory=DpoConfig, description="the dpo record's pairs")
    prm: PrmConfig = Field(default_factory=PrmConfig, description="the prm record's labels")
    decontamination: DecontaminationConfig = Field(
        default_factory=DecontaminationConfig,
        description="n-gram overlap check of the problems against benchmark test sets",
    )


__all__ = [
    "DpoConfig",
    "Pairing",
    "PrmConfig",
    "PseudoLabel",
    "RecordsConfig",
    "SelfCorrection",
    "SftConfig",
]
