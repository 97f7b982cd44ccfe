"""Typed search configurations: every knob of every algorithm, paper defaults.

One pydantic model per algorithm, told apart by the `algorithm` field, so a
YAML run config validates with an error that names the bad field.
"""

from __future__ import annotations

import enum
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from search.answers import AnswerExtraction
from search.budget import CostModel

CONTINUATION_PROMPT = "But wait, let me think about the problem again."


class NodeUnit(enum.StrEnum):
    """Sec. 4.1: a node is one step (stop at the boundary) or a whole solution."""

    SEQUENTIAL = "sequential"
    FULL = "full"


class Conventions(enum.StrEnum):
    """Whose decisions a search reproduces where the paper and its released code differ.

    `paper` follows the equations; `reference` follows the released code
    (github.com/Sora-Miyamoto/bg-mcts), which produced the paper's tables.  The
    README's "Points the paper leaves open" lists every difference.
    """

    PAPER = "paper"
    REFERENCE = "reference"


# The released driver's fixed charges (experiments/math/run_vllm.py): "Step 1:" per root
# child and the continuation prompt (15 tokens; 16 for Gemma-3).
REFERENCE_ROOT_CHILD_CHARGE = 4
REFERENCE_CONTINUATION_CHARGE = 15


class AnswerRule(enum.StrEnum):
    HIGHEST_Q = "highest_q"  # the paper's math protocol (Sec. 4.1)
    MAJORITY = "majority"  # the paper's physics protocol (Sec. 4.3)
    Q_WEIGHTED = "q_weighted"


class CostWeights(BaseModel):
    """Cost units per token kind; the defaults are the paper's output-token budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy_output: float = Field(1.0, ge=0)
    policy_input: float = Field(0.0, ge=0)
    prm_input: float = Field(0.0, ge=0)
    prm_output: float = Field(0.0, ge=0)
    # What one score may cost at most, reserved before each expansion when PRM tokens are charged.
    prm_reserve_input_tokens: int = Field(4096, ge=0)
    prm_reserve_output_tokens: int = Field(1024, ge=0)

    def model(self) -> CostModel:
        return CostModel(self.policy_output, self.policy_input, self.prm_input, self.prm_output)

    def score_reserve(self) -> float:
        return (
            self.prm_reserve_input_tokens * self.prm_input
            + self.prm_reserve_output_tokens * self.prm_output
        )


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_unit: NodeUnit = NodeUnit.SEQUENTIAL
    temperature: float = Field(0.8, ge=0)
    step_max_tokens: int = Field(1024, ge=1, description="per-request cap, sequential nodes")
    full_max_tokens: int = Field(4096, ge=1, description="per-request cap, full-generation nodes")
    step_boundary: str = Field("\nStep", min_length=1)
    response_prefix: str = "Step 1:"
    continuation_prompt: str = CONTINUATION_PROMPT
    answer_rule: AnswerRule = AnswerRule.HIGHEST_Q
    # `boxed` is the paper's App. A rule; `last_number` is for models that never box.
    answer_extraction: AnswerExtraction = AnswerExtraction.BOXED
    cost: CostWeights = CostWeights()
    max_stalled_expansions: int = Field(
        16, ge=1, description="stop after this many expansions in a row that spend nothing"
    )
    conventions: Conventions = Conventions.PAPER
    # Fixed charges, each settable apart from `conventions` (which only picks their defaults).
    root_child_charge: int = Field(0, ge=0, description="tokens charged per child of the root")
    continuation_charge: int | None = Field(
        None, ge=0, description="tokens charged per continuation prompt; None: its token count"
    )

    @model_validator(mode="before")
    @classmethod
    def _reference_charges(cls, data: object) -> object:
        """Under `reference`, unset charges take the released driver's values."""
        if isinstance(data, dict) and data.get("conventions") == Conventions.REFERENCE:
            data = dict(data)
            data.setdefault("root_child_charge", REFERENCE_ROOT_CHILD_CHARGE)
            data.setdefault("continuation_charge", REFERENCE_CONTINUATION_CHARGE)
        return data

    @property
    def reference(self) -> bool:
        return self.conventions is Conventions.REFERENCE


class _EarlyStop(BaseModel):
    early_stop: bool = False
    early_stop_threshold: float = Field(0.9, ge=0, le=1)


class BGMCTSConfig(_Common, _EarlyStop):
    """BG-MCTS (Sec. 3) with the ablation switches of Table 2 and App. G."""

    algorithm: Literal["bg_mcts"] = "bg_mcts"
    k: int = Field(2, ge=1, description="children generated at a selected leaf")
    c: float = Field(math.sqrt(2), gt=0)
    kappa: float = Field(1.0, ge=0)
    lam: float = Field(1.0, ge=0, description="lambda of Eq. 5")
    explore_annealing: bool = True  # rho factor in Eq. 3
    exploit_shaping: bool = True  # completion bias of Eq. 4
    widen_annealing: bool = True  # rho factor in Eq. 5
    generative_node: bool = True  # the virtual generative child (App. G)


class MCTSConfig(_Common, _EarlyStop):
    """Budget-agnostic MCTS with PUCT (Eq. 1); App. B's tuned k=2, c=sqrt(2)."""

    algorithm: Literal["mcts"] = "mcts"
    k: int = Field(2, ge=1)
    c: float = Field(math.sqrt(2), gt=0)


class ABMCTSConfig(_Common):
    """AB-MCTS-M / AB-MCTS-A through `treequest`; the paper runs -M with both node units."""

    algorithm: Literal["ab_mcts_m", "ab_mcts_a"] = "ab_mcts_m"
    node_unit: NodeUnit = NodeUnit.FULL
    dist_type: Literal["gaussian", "beta"] = "gaussian"  # AB-MCTS-A only
    enable_pruning: bool = True  # AB-MCTS-M only


class LiteSearchConfig(_Common):
    """LiteSearch (App. C): value- and depth-dependent expansion width, early stop."""

    algorithm: Literal["litesearch"] = "litesearch"
    mode: Literal["incremental", "batch"] = "incremental"
    epsilon: float = Field(0.9, gt=0, lt=1)
    max_width: int = Field(10, ge=1)
    early_stop: bool = True
    early_stop_threshold: float = Field(0.9, ge=0, le=1)
    # The paper continues answered nodes (Sec. 4.1); original LiteSearch treats them as terminal.
    expand_answered: bool = True


class BeamConfig(_Common):
    """Step-level beam search (App. H): width 5, branching 10."""

    algorithm: Literal["beam"] = "beam"
    width: int = Field(5, ge=1)
    branching: int = Field(10, ge=1)


class RepeatedSamplingConfig(_Common):
    algorithm: Literal["repeated_sampling"] = "repeated_sampling"
    node_unit: NodeUnit = NodeUnit.FULL


class RefinementConfig(_Common):
    algorithm: Literal["refinement"] = "refinement"
    node_unit: NodeUnit = NodeUnit.FULL


class GreedyConfig(_Common):
    algorithm: Literal["greedy"] = "greedy"
    node_unit: NodeUnit = NodeUnit.FULL
    temperature: float = 0.0


SearchConfig = Annotated[
    BGMCTSConfig
    | MCTSConfig
    | ABMCTSConfig
    | LiteSearchConfig
    | BeamConfig
    | RepeatedSamplingConfig
    | RefinementConfig
    | GreedyConfig,
    Field(discriminator="algorithm"),
]

_ADAPTER: TypeAdapter[SearchConfig] = TypeAdapter(SearchConfig)

ALGORITHMS: tuple[str, ...] = (
    "bg_mcts",
    "mcts",
    "ab_mcts_m",
    "ab_mcts_a",
    "litesearch",
    "beam",
    "repeated_sampling",
    "refinement",
    "greedy",
)


def parse_search_config(data: object) -> SearchConfig:
    """Validate a mapping (e.g. from YAML) into the config of its `algorithm`."""
    return _ADAPTER.validate_python(data)
