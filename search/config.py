"""Typed search configurations: every knob of every algorithm, paper defaults.

One pydantic model per algorithm, told apart by the `algorithm` field, so a
YAML run config validates with an error that names the bad field.
"""

from __future__ import annotations

import enum
import math
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, TypeAdapter, model_validator

from search.answers import AnswerExtraction
from search.budget import TokenWeights
from search.strict_config import StrictConfig

CONTINUATION_PROMPT = "But wait, let me think about the problem again."


class NodeUnit(enum.StrEnum):
    """Sec. 4.1: a node is one step (stop at the boundary) or a whole solution."""

    SEQUENTIAL = "sequential"
    FULL = "full"


class Conventions(enum.StrEnum):
    """Whose decisions a search reproduces where the paper and its released code differ.

    `paper` follows the equations; `reference` follows the released code
    (github.com/Sora-Miyamoto/bg-mcts), which produced the paper's tables.  The
    docs/search.md, "Points the paper leaves open", lists every difference.
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


class CostWeights(TokenWeights):
    """Cost units per token kind; the defaults are the paper's output-token budget."""

    # What one score may cost at most, reserved before each expansion when PRM tokens are charged.
    prm_reserve_input_tokens: int = Field(
        4096,
        ge=0,
        description="PRM prompt tokens one score may use at most; reserved from the budget "
        "before each expansion when PRM tokens are charged",
    )
    prm_reserve_output_tokens: int = Field(
        1024,
        ge=0,
        description="PRM generated tokens one score may use at most; reserved like "
        "prm_reserve_input_tokens",
    )


class _Common(StrictConfig):
    # The algorithm class this config builds, "module:Class" (`make_algorithm` imports the
    # module only then and calls `Class.from_config`): a new algorithm is a config class
    # here (added to `SearchConfig`) and a module, with no list of them anywhere else.
    builds: ClassVar[str]

    node_unit: NodeUnit = Field(
        NodeUnit.SEQUENTIAL,
        description="what a node is (Sec. 4.1): sequential = one step (generation stops at "
        "step_boundary), full = a whole solution",
    )
    temperature: float = Field(
        0.8, ge=0, description="policy sampling temperature (the paper's runs: 0.6)"
    )
    step_max_tokens: int = Field(
        1024,
        ge=1,
        description="max_tokens cap of one policy request for sequential nodes (the paper's "
        "runs: 8,192)",
    )
    full_max_tokens: int = Field(
        4096,
        ge=1,
        description="max_tokens cap of one policy request for full-generation nodes (the "
        "paper's runs: 8,192)",
    )
    step_boundary: str = Field(
        "\nStep",
        min_length=1,
        description="stop string that ends a sequential step; put back before the next step",
    )
    response_prefix: str = Field(
        "Step 1:", description="text prefilled at the start of the assistant turn (every path)"
    )
    continuation_prompt: str = Field(
        CONTINUATION_PROMPT,
        description="text inserted to continue an answered node (Sec. 4.1); charged like output",
    )
    answer_rule: AnswerRule = Field(
        AnswerRule.HIGHEST_Q,
        description="final answer among answered nodes: highest_q (math, Sec. 4.1), majority "
        "(physics, Sec. 4.3) or q_weighted (largest sum of Q)",
    )
    # `boxed` is the paper's App. A rule; `last_number` is for models that never box.
    answer_extraction: AnswerExtraction = Field(
        AnswerExtraction.BOXED,
        description="how a node's answer is read: boxed = the last \\boxed{...} (App. A); "
        "last_number = that, else the number after 'answer is', else the last number",
    )
    cost: CostWeights = Field(
        CostWeights(),
        description="cost units per token kind, the budget's currency (default: policy output "
        "tokens only, as in the paper)",
    )
    max_stalled_expansions: int = Field(
        16, ge=1, description="stop after this many expansions in a row that spend nothing"
    )
    conventions: Conventions = Field(
        Conventions.PAPER,
        description="paper: follow the equations; reference: the released code's decisions "
        "(docs/search.md, 'conventions'), which also sets the fixed charges' defaults",
    )
    # Fixed charges, each settable apart from `conventions` (which only picks their defaults).
    root_child_charge: int = Field(
        0, ge=0, description="tokens charged per child of the root (reference default: 4)"
    )
    continuation_charge: int | None = Field(
        None,
        ge=0,
        description="tokens charged per continuation prompt; None: its token count "
        "(reference default: 15)",
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
    early_stop: bool = Field(
        False, description="stop once an answered node scores Q above early_stop_threshold (App. I)"
    )
    early_stop_threshold: float = Field(
        0.9, ge=0, le=1, description="Q an answered node must exceed to stop early (App. I: 0.9)"
    )


class _InFlight(BaseModel):
    max_inflight_expansions: int = Field(
        1,
        ge=1,
        description="expansions of one tree in flight at once; 1: the paper's one at a time. "
        "Above 1 the next leaf is selected while earlier ones are generated or scored (a "
        "virtual loss on each pending path) and each pending expansion's largest cost is "
        "reserved, so C_used <= B whatever order results arrive in",
    )

    @model_validator(mode="after")
    def _inflight_needs_paper(self) -> _InFlight:
        if self.max_inflight_expansions > 1 and getattr(self, "reference", False):
            raise ValueError(
                "max_inflight_expansions > 1 needs conventions: paper (the released code "
                "expands one child per request, one at a time)"
            )
        return self


class BGMCTSConfig(_Common, _EarlyStop, _InFlight):
    """BG-MCTS (Sec. 3) with the ablation switches of Table 2 and App. G."""

    builds: ClassVar[str] = "search.algorithms.puct:PuctSearch"

    algorithm: Literal["bg_mcts"] = Field("bg_mcts", description="BG-MCTS (Sec. 3)")
    k: int = Field(2, ge=1, description="children generated at a selected leaf (App. B: 2)")
    c: float = Field(
        math.sqrt(2), gt=0, description="exploration weight c of BG-PUCT (Eq. 3; App. B: sqrt 2)"
    )
    kappa: float = Field(1.0, ge=0, description="weight kappa of the completion bias (Eq. 4)")
    lam: float = Field(1.0, ge=0, description="weight lambda of the variance term of E_gen (Eq. 5)")
    explore_annealing: bool = Field(
        True, description="the rho factor of the exploration term (Eq. 3); off: Table 2 ablation"
    )
    exploit_shaping: bool = Field(
        True, description="the completion bias of W~ (Eq. 4); off: plain W (Table 2 ablation)"
    )
    widen_annealing: bool = Field(
        True, description="the rho factor of E_gen (Eq. 5); off: Table 2 ablation"
    )
    generative_node: bool = Field(
        True,
        description="the virtual generative child that widens a node (Eqs. 5-6); off: App. G",
    )


class MCTSConfig(_Common, _EarlyStop, _InFlight):
    """Budget-agnostic MCTS with PUCT (Eq. 1); App. B's tuned k=2, c=sqrt(2)."""

    builds: ClassVar[str] = "search.algorithms.puct:PuctSearch"

    algorithm: Literal["mcts"] = Field("mcts", description="budget-agnostic MCTS (Eq. 1)")
    k: int = Field(2, ge=1, description="children generated at a selected leaf (App. B: 2)")
    c: float = Field(
        math.sqrt(2),
        gt=0,
        description="exploration weight c of PUCT (Eq. 1; App. B: sqrt 2); under reference "
        "the effective weight is sqrt(c)",
    )


class ABMCTSConfig(_Common):
    """AB-MCTS-M / AB-MCTS-A through `treequest`; the paper runs -M with both node units."""

    builds: ClassVar[str] = "search.algorithms.ab_mcts:ABMCTS"

    algorithm: Literal["ab_mcts_m", "ab_mcts_a"] = Field(
        "ab_mcts_m", description="ab_mcts_m: AB-MCTS-M (mixed model); ab_mcts_a: AB-MCTS-A"
    )
    node_unit: NodeUnit = Field(
        NodeUnit.FULL,
        description="what a node is: full = a whole solution, sequential = one step",
    )
    dist_type: Literal["gaussian", "beta"] = Field(
        "gaussian", description="AB-MCTS-A's score distribution (treequest); AB-MCTS-A only"
    )
    enable_pruning: bool = Field(True, description="treequest's subtree pruning; AB-MCTS-M only")


class LiteSearchConfig(_Common):
    """LiteSearch (App. C): value- and depth-dependent expansion width, early stop."""

    builds: ClassVar[str] = "search.algorithms.litesearch:LiteSearch"

    algorithm: Literal["litesearch"] = Field("litesearch", description="LiteSearch (App. C)")
    mode: Literal["incremental", "batch"] = Field(
        "incremental",
        description="incremental: one child per step; batch: all of a node's remaining width "
        "in one request (Table 1's LiteSearch-Incre. / -Batch)",
    )
    epsilon: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="width target: the smallest C with 1 - (1 - Q)^C > epsilon (App. C: 0.9; "
        "the released code's runs: 0.8)",
    )
    max_width: int = Field(10, ge=1, description="most children of one node (App. C: 10)")
    early_stop: bool = Field(
        True,
        description="stop once an answered node scores Q above early_stop_threshold "
        "(App. C, App. I)",
    )
    early_stop_threshold: float = Field(
        0.9, ge=0, le=1, description="Q an answered node must exceed to stop early (App. C: 0.9)"
    )
    # The paper continues answered nodes (Sec. 4.1); original LiteSearch treats them as terminal.
    expand_answered: bool = Field(
        True,
        description="continue answered nodes (Sec. 4.1); false: they are terminal, as in the "
        "original LiteSearch",
    )


class BeamConfig(_Common):
    """Step-level beam search (App. H): width 5, branching 10."""

    builds: ClassVar[str] = "search.algorithms.beam:BeamSearch"

    algorithm: Literal["beam"] = Field("beam", description="step-level beam search (App. H)")
    width: int = Field(5, ge=1, description="beam width W: children kept per step (App. H: 5)")
    branching: int = Field(
        10, ge=1, description="branching factor K: children per beam per step (App. H: 10)"
    )


class RepeatedSamplingConfig(_Common):
    """Repeated sampling (Sec. 4.1): independent samples from the root until B is spent."""

    builds: ClassVar[str] = "search.algorithms.sampling:RepeatedSampling"

    algorithm: Literal["repeated_sampling"] = Field(
        "repeated_sampling", description="independent samples from the root (Sec. 4.1)"
    )
    node_unit: NodeUnit = Field(
        NodeUnit.FULL, description="what a sample is: full = a whole solution, sequential = a step"
    )


class RefinementConfig(_Common):
    """Sequential refinement (Sec. 4.1): one trajectory, each answer continued until B is spent."""

    builds: ClassVar[str] = "search.algorithms.sampling:SequentialRefinement"

    algorithm: Literal["refinement"] = Field(
        "refinement",
        description="one trajectory, each answer continued with the continuation prompt (Sec. 4.1)",
    )
    node_unit: NodeUnit = Field(
        NodeUnit.FULL, description="what a node is: full = a whole solution, sequential = a step"
    )


class GreedyConfig(_Common):
    """Greedy decoding (Sec. 4.1): one full generation at temperature 0."""

    builds: ClassVar[str] = "search.algorithms.sampling:Greedy"

    algorithm: Literal["greedy"] = Field("greedy", description="one generation (Sec. 4.1)")
    node_unit: NodeUnit = Field(
        NodeUnit.FULL, description="what the node is: full = a whole solution, sequential = a step"
    )
    temperature: float = Field(0.0, description="policy sampling temperature; 0: greedy decoding")


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
