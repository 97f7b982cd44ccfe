"""Graded search trees as flat records: the Parquet schemas and the pure functions that fill them.

Eight record types, one `pyarrow.Schema` each (every field carries its own
``description`` in the field metadata; `schema_markdown` renders them for the
README):

* ``nodes`` (`NODES_SCHEMA`) - every answered node, correct or not, with its
  full trajectory, PRM score and label;
* ``trees`` (`TREES_SCHEMA`) - one row per searched problem: chosen answer,
  tokens by kind, counts, shape, time, why the search stopped, contamination;
* ``sft`` (`SFT_SCHEMA`) - TRL conversational prompt-completion rows
  (``prompt`` = the user turn, ``completion`` = the assistant turn) from the
  nodes labelled correct, so TRL's SFTTrainer trains on the completion only;
* ``dpo`` (`DPO_SCHEMA`) - TRL conversational preference rows (``prompt``,
  ``chosen``, ``rejected``) pairing correct with incorrect trajectories of a
  problem that share a prefix and then diverge;
* ``prm`` (`PRM_SCHEMA`) - TRL stepwise supervision (``prompt``,
  ``completions`` = the steps of one path, ``labels`` = one bool per step)
  plus a soft Monte-Carlo ``values`` column;
* ``kto`` (`KTO_SCHEMA`) - TRL unpaired preference rows (``prompt``,
  ``completion``, ``label``);
* ``tree_nodes`` (`TREE_NODES_SCHEMA`) - every node of every tree, so any
  relabelling or analysis can be redone from Parquet alone;
* ``errors`` (`ERRORS_SCHEMA`) - a problem (or a source) that failed, and where.

Grading (`grade_result`)
    With a reference answer each *distinct* extracted answer of the tree is
    compared once with math-verify (`actors.grading.answers_match`, bounded by
    ``timeout_s`` per comparison; a timeout or a parse failure is "incorrect"),
    and every node carrying it gets that verdict: ``label_source = "reference"``.
    Without a reference the labels are pseudo labels (``pseudo_label = true``):

    * ``prm_threshold``: an answered node is labelled correct when its Q >= threshold;
    * ``majority``: the distinct answers are grouped by math-verify equivalence
      (each new answer is compared with one representative of every group) and
      the nodes of the largest group are labelled correct; ties go to the group
      with the higher best Q, then to the group reached first.

    An answered node without an extractable ``\\boxed{}`` answer is always incorrect.

SFT rows (`sft_rows`)
    The answered nodes labelled correct (by reference or pseudo label) with
    Q >= ``min_score``, best Q first; with ``dedupe`` only the best-Q node of
    identical trajectories (exact assistant text) is kept.  By default only
    *clean* paths are kept: the node's answer is the only one on its path
    (``answers_in_path == 1``).  A path that answered earlier and went on with
    the continuation prompt ("But wait, let me think about the problem
    again.") is a self-correction trace; most such traces state a wrong answer
    first, so SFT on them teaches answering wrong first.
    ``sft.self_correction: include`` keeps them too, ``only`` keeps only them.
    Nobody in this project reads a ``messages`` column, so there is none: TRL
    trains on every token of ``messages`` data (SmolLM2's template has no
    ``{% generation %}`` markers for ``assistant_only_loss``).

DPO pairs (`dpo_rows`)
    Per problem, correct trajectories (chosen) against incorrect ones
    (rejected), both deduplicated first (the best-Q copy of a correct one, the
    worst-Q copy of an incorrect one; at most `PAIR_POOL` of each).  Every
    candidate pair gets a type from where the two paths part in the tree
    (`pipeline.records.tree_paths.divergence`): ``siblings`` (children of one node),
    ``cousins`` (they part at a non-root node, one or both deeper below it),
    ``root`` (no generated step in common) or ``prefix`` (one trajectory
    extends the other: the rejected one answered past the chosen one, or the
    reverse).  Only the types in ``dpo.pair_types`` are kept; ``prefix`` is
    off by default because such a pair prefers *stopping* over an identical
    text, not a better step.  Candidates are then taken greedily in the
    rule's order, every node used at most once, at most
    ``max_pairs_per_problem`` pairs:

    * ``shared_prefix`` (default): the longest shared prefix first (most
      shared steps), so the preference is about the part that differs; ties
      go to the larger Q gap, then to lower node ids;
    * ``best_vs_worst``: the largest Q gap first (the highest-Q correct
      against the lowest-Q incorrect, then the next of each, ...);
    * ``random``: an order shuffled with a generator seeded from
      ``(seed, problem_id)``; the same inputs give the same pairs.

    The prompt is the policy's user turn alone (one message); chosen and
    rejected are whole assistant turns, the shared prefix included (TRL's
    conversational preference format).

PRM rows (`prm_rows`)
    One row per distinct answered trajectory (self-correction traces
    included): its steps are the tree nodes on its path.  A step's label comes
    from the tree below it, as Math-Shepherd's estimates do from rollouts: an
    unanswered step is good (hard label) when at least one answered node in
    its subtree is labelled correct, and its soft value is the fraction of
    the answered nodes in its subtree that are correct; an answered step
    carries its own answer's label (value 1.0 or 0.0), whatever continuations
    below it reached.  Every step of a path has at least the path's own
    answer below it, so no value is undefined.  Without a reference answer the
    labels would be pseudo labels (with ``prm_threshold``, the PRM's own
    scores): such problems give no prm rows unless ``prm.pseudo_labels``.

KTO rows (`kto_rows`)
    Every distinct answered trajectory of a problem (best Q first), labelled
    desirable when correct; the SFT self-correction rule applies to both
    labels.

Decontamination
    `records_for` takes the benchmark a problem overlaps (found by
    `pipeline.problems.decontamination`): such a problem keeps its nodes, trees and
    tree_nodes rows (``trees.contaminated`` names the benchmark) and gives no
    sft, dpo, prm or kto rows.

Everything here is pure (no file I/O, no Ray); a sink writes the tables.
"""

from __future__ import annotations

import asyncio
import numbers
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field

from actors.grading import answers_match, counting
from actors.prompts import POLICY_INSTRUCTION, policy_messages
from pipeline.problems.decontamination import DecontaminationConfig
from pipeline.records.tree_paths import (
    Divergence,
    PairType,
    answers_on_path,
    divergence,
    path_steps,
    subtree_answers,
)
from search.answer_choice import normalize_answer
from search.driver import SearchResult, derive_seed
from search.protocols import FinishReason
from search.tree import Node

LabelSource = Literal["reference", "prm_threshold", "majority"]
PseudoLabel = Literal["prm_threshold", "majority"]
Pairing = Literal["shared_prefix", "best_vs_worst", "random"]
SelfCorrection = Literal["exclude", "include", "only"]
Row = dict[str, Any]

SCHEMA_VERSION = "2"  # 2: sft prompt-completion, dpo pair types, prm/kto/tree_nodes
_UNSCORED = (None, FinishReason.ERROR, FinishReason.CONTEXT_OVERFLOW)


# --------------------------------------------------------------------------- config
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
    sft: SftConfig = Field(default_factory=SftConfig)
    dpo: DpoConfig = Field(default_factory=DpoConfig)
    prm: PrmConfig = Field(default_factory=PrmConfig)
    decontamination: DecontaminationConfig = Field(default_factory=DecontaminationConfig)


# --------------------------------------------------------------------------- schemas
def doc_field(name: str, type_: Any, doc: str, *, nullable: bool = False) -> Any:
    return pa.field(name, type_, nullable=nullable, metadata={"description": doc})


def record_schema(record: str, fields: list[Any]) -> Any:
    return pa.schema(fields, metadata={"record": record, "schema_version": SCHEMA_VERSION})


MESSAGE_TYPE = pa.struct(
    [
        pa.field("role", pa.string(), nullable=False),
        pa.field("content", pa.string(), nullable=False),
    ]
)
# "element" is Parquet's name for a list's item, so the schema survives a round trip unchanged
MESSAGES_TYPE = pa.list_(pa.field("element", MESSAGE_TYPE, nullable=False))

# The anytime trace of a tree: the same fields the evaluation report's curves read.
TRACE_POINT = pa.struct(
    [
        pa.field("c_used", pa.float64(), nullable=False),
        pa.field("any_answer", pa.bool_(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("max_depth", pa.int64(), nullable=False),
        pa.field("max_width", pa.int64(), nullable=False),
    ]
)

_RUN_ID = doc_field("run_id", pa.string(), "identifier of the synthesis run that wrote the row")
_PROBLEM_ID = doc_field("problem_id", pa.string(), "identifier of the problem in its source")
_METHOD = doc_field("method", pa.string(), "search algorithm (SearchResult.algorithm)")
_BUDGET = doc_field("budget", pa.float64(), "the search budget B, in cost units")
_POLICY = doc_field("policy_model", pa.string(), "policy model name", nullable=True)
_PRM = doc_field("prm_model", pa.string(), "scorer (PRM) model name", nullable=True)
_LABEL_SOURCE = doc_field(
    "label_source",
    pa.string(),
    "where the labels come from: reference, prm_threshold or majority",
)

NODES_SCHEMA = record_schema(
    "nodes",
    [
        _RUN_ID,
        _PROBLEM_ID,
        doc_field(
            "node_id", pa.int64(), "node id within its tree (the root, the bare problem, is 0)"
        ),
        doc_field("parent_id", pa.int64(), "id of the parent node (0 for a first step)"),
        doc_field("trajectory", pa.string(), 'full assistant text: "Step 1:" plus every segment'),
        doc_field("answer", pa.string(), "the last \\boxed{} content; null if none", nullable=True),
        doc_field("score", pa.float64(), "the node's PRM score Q in [0, 1]"),
        doc_field(
            "correct",
            pa.bool_(),
            "math-verify verdict against the reference; null without a reference",
            nullable=True,
        ),
        doc_field(
            "label", pa.bool_(), "the label used for SFT/DPO: `correct`, else the pseudo label"
        ),
        doc_field("pseudo_label", pa.bool_(), "true when `label` is a pseudo label (no reference)"),
        _LABEL_SOURCE,
        doc_field("is_chosen", pa.bool_(), "whether the search chose this node's answer node"),
        doc_field("depth", pa.int64(), "depth in the tree (a first step is 1)"),
        doc_field("iteration", pa.int64(), "the search step that created the node"),
        doc_field("c_used", pa.float64(), "cost units spent when the node was created, before it"),
        doc_field("output_tokens", pa.int64(), "tokens the policy generated for this node"),
        doc_field(
            "finish", pa.string(), "why its generation ended (eos, stop, length...)", nullable=True
        ),
        _METHOD,
        _POLICY,
        _PRM,
        _BUDGET,
        doc_field("seed", pa.int64(), "the search's seed"),
    ],
)
"""`nodes`: one row per answered node of every tree."""

TREES_SCHEMA = record_schema(
    "trees",
    [
        _RUN_ID,
        _PROBLEM_ID,
        doc_field(
            "chosen_answer", pa.string(), "the answer the search chose; null if none", nullable=True
        ),
        doc_field(
            "chosen_node_id", pa.int64(), "the node carrying it; null if none", nullable=True
        ),
        doc_field(
            "correct",
            pa.bool_(),
            "chosen answer matches the reference (math-verify); null without a reference",
            nullable=True,
        ),
        doc_field("reference", pa.string(), "the reference answer, if any", nullable=True),
        _LABEL_SOURCE,
        doc_field("policy_output_tokens", pa.int64(), "tokens generated by the policy"),
        doc_field("policy_input_tokens", pa.int64(), "prompt tokens sent to the policy"),
        doc_field(
            "inserted_prompt_tokens", pa.int64(), "tokens the search inserted (continuations)"
        ),
        doc_field("prm_input_tokens", pa.int64(), "tokens read by the scorer"),
        doc_field("prm_output_tokens", pa.int64(), "tokens generated by the scorer"),
        doc_field("c_used", pa.float64(), "cost units spent (never above `budget`)"),
        doc_field("n_nodes", pa.int64(), "nodes in the tree, the root excluded"),
        doc_field("n_answered", pa.int64(), "answered nodes"),
        doc_field("n_correct", pa.int64(), "answered nodes whose label is true (see label_source)"),
        doc_field("max_depth", pa.int64(), "deepest node"),
        doc_field("max_width", pa.int64(), "most nodes at one depth"),
        doc_field("wall_time_s", pa.float64(), "search wall time, seconds"),
        doc_field(
            "stop_reason", pa.string(), "budget_exhausted | early_stop | algorithm_done | stalled"
        ),
        doc_field("iterations", pa.int64(), "search steps taken"),
        doc_field(
            "contaminated",
            pa.string(),
            "the benchmark the problem overlaps (see decontamination); such a problem "
            "gives no sft, dpo, prm or kto rows; null when clean or not checked",
            nullable=True,
        ),
        doc_field(
            "grade_timeouts",
            pa.int64(),
            "answer comparisons cut off by their time limit or refused as too costly "
            "(graded incorrect)",
        ),
        _METHOD,
        _POLICY,
        _PRM,
        _BUDGET,
        doc_field("seed", pa.int64(), "the search's seed"),
        doc_field(
            "node_scores",
            pa.list_(pa.field("element", pa.float64(), nullable=False)),
            "PRM score Q of every scored node (root and failed nodes excluded), creation order",
            nullable=True,
        ),
        doc_field(
            "trace",
            pa.list_(pa.field("element", TRACE_POINT, nullable=False)),
            "state after every search step: C_used, any answer yet, chosen answer correct "
            "(false without a reference), max depth, max width",
            nullable=True,
        ),
    ],
)
"""`trees`: one row per searched problem."""

_ANSWERS_IN_PATH = (
    "answered nodes on the root-to-node path, this one included: 1 for a clean path, "
    "more for a self-correction trace (it answered, was told to think again, answered again)"
)

SFT_SCHEMA = record_schema(
    "sft",
    [
        doc_field(
            "prompt",
            MESSAGES_TYPE,
            "TRL conversational prompt-completion format: the policy's user turn (one message)",
        ),
        doc_field(
            "completion",
            MESSAGES_TYPE,
            "one assistant message: the full trajectory (TRL trains on these tokens only)",
        ),
        _PROBLEM_ID,
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("depth", pa.int64(), "steps in the trajectory"),
        doc_field("answers_in_path", pa.int64(), _ANSWERS_IN_PATH),
        _LABEL_SOURCE,
        _RUN_ID,
    ],
)
"""`sft`: supervised fine-tuning rows from correct answered nodes."""

DPO_SCHEMA = record_schema(
    "dpo",
    [
        doc_field("prompt", MESSAGES_TYPE, "TRL preference format: the user turn (one message)"),
        doc_field("chosen", MESSAGES_TYPE, "one assistant message: a correct trajectory"),
        doc_field("rejected", MESSAGES_TYPE, "one assistant message: an incorrect trajectory"),
        doc_field("score_chosen", pa.float64(), "PRM score Q of the chosen node"),
        doc_field("score_rejected", pa.float64(), "PRM score Q of the rejected node"),
        doc_field("chosen_node_id", pa.int64(), "node id of the chosen trajectory"),
        doc_field("rejected_node_id", pa.int64(), "node id of the rejected trajectory"),
        doc_field("chosen_answer", pa.string(), "answer of the chosen node", nullable=True),
        doc_field("rejected_answer", pa.string(), "answer of the rejected node", nullable=True),
        doc_field(
            "pair_type",
            pa.string(),
            "siblings (children of one node), cousins (part at a deeper node), root (share "
            "no generated step) or prefix (one extends the other; off by default)",
        ),
        doc_field(
            "shared_steps", pa.int64(), "generated steps both trajectories share before they part"
        ),
        doc_field(
            "shared_prefix_chars",
            pa.int64(),
            "characters of assistant text both trajectories share (the common ancestor's text)",
        ),
        doc_field("chosen_answers_in_path", pa.int64(), "answers_in_path of the chosen node"),
        doc_field("rejected_answers_in_path", pa.int64(), "answers_in_path of the rejected node"),
        doc_field("pairing", pa.string(), "pairing rule: shared_prefix, best_vs_worst or random"),
        _LABEL_SOURCE,
        _PROBLEM_ID,
        _RUN_ID,
    ],
)
"""`dpo`: preference pairs, a correct against an incorrect node of one problem."""

ERRORS_SCHEMA = record_schema(
    "errors",
    [
        doc_field(
            "problem_id",
            pa.string(),
            "the failed problem; null for a failure outside one",
            nullable=True,
        ),
        doc_field(
            "stage", pa.string(), "where it failed (source, search, grade, records, sink...)"
        ),
        doc_field("error_type", pa.string(), "exception class name, if any", nullable=True),
        doc_field("message", pa.string(), "the error message"),
        _RUN_ID,
    ],
)
"""`errors`: one row per failure, so a run never loses a problem silently."""


def _list_of(type_: Any) -> Any:
    return pa.list_(pa.field("element", type_, nullable=False))


PRM_SCHEMA = record_schema(
    "prm",
    [
        doc_field(
            "prompt",
            pa.string(),
            "TRL stepwise-supervision format: the problem statement (plain text)",
        ),
        doc_field(
            "completions",
            _list_of(pa.string()),
            "the steps of one root-to-answer path, one string per tree node (the first "
            'starts with "Step 1:")',
        ),
        doc_field(
            "labels",
            _list_of(pa.bool_()),
            "one per step: an unanswered step is good when a correct answer is reached in "
            "the tree below it; an answered step carries its own answer's label",
        ),
        doc_field(
            "values",
            _list_of(pa.float64()),
            "one per step, soft Monte-Carlo value: the fraction of answered nodes below the "
            "step that are correct (an answered step: its own label, 1.0 or 0.0)",
        ),
        doc_field("step_node_ids", _list_of(pa.int64()), "the tree node of each step"),
        _PROBLEM_ID,
        doc_field("node_id", pa.int64(), "the answered node the path ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("answers_in_path", pa.int64(), _ANSWERS_IN_PATH),
        _LABEL_SOURCE,
        _RUN_ID,
    ],
)
"""`prm`: step-level labels of every answered path, from the subtree under each step."""

KTO_SCHEMA = record_schema(
    "kto",
    [
        doc_field(
            "prompt", MESSAGES_TYPE, "TRL unpaired preference format: the user turn (one message)"
        ),
        doc_field("completion", MESSAGES_TYPE, "one assistant message: the full trajectory"),
        doc_field("label", pa.bool_(), "true: desirable (a correct answer), false: undesirable"),
        _PROBLEM_ID,
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("answers_in_path", pa.int64(), _ANSWERS_IN_PATH),
        _LABEL_SOURCE,
        _RUN_ID,
    ],
)
"""`kto`: every distinct answered trajectory with its label."""

TREE_NODES_SCHEMA = record_schema(
    "tree_nodes",
    [
        _RUN_ID,
        _PROBLEM_ID,
        doc_field("node_id", pa.int64(), "node id within its tree; ids grow in creation order"),
        doc_field(
            "parent_id", pa.int64(), "id of the parent node; null for the root", nullable=True
        ),
        doc_field("depth", pa.int64(), "depth in the tree (the root is 0)"),
        doc_field("d", pa.int64(), "d(x): steps since the nearest answered ancestor (0: answered)"),
        doc_field(
            "text",
            pa.string(),
            "the step the policy generated (boundary excluded); the root: the problem statement",
        ),
        doc_field(
            "inserted_text",
            pa.string(),
            "text the search put before `text` (step boundary, continuation prompt); the "
            "root: the response prefix every trajectory starts with. A trajectory is the "
            "root's inserted_text plus inserted_text + text of every node on its path",
        ),
        doc_field("q", pa.float64(), "the PRM score Q in [0, 1] (the root: 0)"),
        doc_field("answered", pa.bool_(), "the node completed an answer"),
        doc_field("answer", pa.string(), "the last \\boxed{} content; null if none", nullable=True),
        doc_field(
            "label",
            pa.bool_(),
            "answered nodes: the label used for training (see the tree's label_source); "
            "null for unanswered nodes",
            nullable=True,
        ),
        doc_field(
            "finish", pa.string(), "why its generation ended; null for the root", nullable=True
        ),
        doc_field("output_tokens", pa.int64(), "tokens the policy generated for this node"),
        doc_field("inserted_tokens", pa.int64(), "tokens of inserted_text charged to the budget"),
        doc_field("c_used", pa.float64(), "C_used when the node was created, before its own cost"),
        doc_field("iteration", pa.int64(), "expansion order: the search step that created it"),
        doc_field(
            "from_generative", pa.bool_(), "created through the virtual generative child (Eq. 5)"
        ),
        doc_field("full_generation", pa.bool_(), "generated as a whole solution, not one step"),
        doc_field("error", pa.string(), "why generating or scoring it failed", nullable=True),
    ],
)
"""`tree_nodes`: every node of every tree, so relabelling can be redone from Parquet."""

SCHEMAS: Mapping[str, Any] = {
    "nodes": NODES_SCHEMA,
    "trees": TREES_SCHEMA,
    "sft": SFT_SCHEMA,
    "dpo": DPO_SCHEMA,
    "prm": PRM_SCHEMA,
    "kto": KTO_SCHEMA,
    "tree_nodes": TREE_NODES_SCHEMA,
    "errors": ERRORS_SCHEMA,
}


def schema_markdown(schema: Any) -> str:
    """A Markdown table of a schema's fields (name, type, nullable, description)."""
    lines = ["| field | type | nullable | description |", "|---|---|---|---|"]
    for f in schema:
        doc = (f.metadata or {}).get(b"description", b"").decode().replace("|", "\\|")
        lines.append(f"| `{f.name}` | `{f.type}` | {'yes' if f.nullable else 'no'} | {doc} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- grading
@dataclass(frozen=True, slots=True)
class GradedTree:
    """A search result with a label for every answered node."""

    problem_id: str
    result: SearchResult
    reference: str | None
    label_source: LabelSource
    labels: Mapping[int, bool]  # answered node id -> label
    chosen_correct: bool | None  # null without a reference
    verified: Mapping[str, bool] = field(default_factory=dict)  # distinct answer -> verdict
    grade_timeouts: int = 0  # comparisons cut off by their limit (graded incorrect)
    # the policy's user-turn template the search ran with (`PromptConfig`): training
    # prompts must be the prompt the trajectories were generated from
    instruction: str = POLICY_INSTRUCTION

    @property
    def pseudo(self) -> bool:
        return self.label_source != "reference"

    def answered(self) -> list[Node]:
        return self.result.answered_nodes

    def trajectory(self, node: Node) -> str:
        return self.result.tree.assistant_text(node)


async def grade_result(
    result: SearchResult,
    reference: str | None,
    *,
    problem_id: str,
    timeout_s: float = 5.0,
    pseudo_label: PseudoLabel = "prm_threshold",
    threshold: float = 0.5,
) -> GradedTree:
    """Label every answered node of `result` (see the module docstring for the rules).

    With a reference, each distinct (whitespace-normalized) answer string is
    verified once; `GradedTree.verified` holds those verdicts.
    """
    nodes = result.answered_nodes
    keys = {n.id: answer_key(n.answer) for n in nodes}
    if reference is not None:
        candidates = [*keys.values(), answer_key(result.chosen_answer)]
        distinct = list(dict.fromkeys(k for k in candidates if k is not None))
        verdicts = await asyncio.gather(*(answers_match(d, reference, timeout_s) for d in distinct))
        verified = dict(zip(distinct, verdicts, strict=True))
        labels = {i: k is not None and verified.get(k, False) for i, k in keys.items()}
        chosen = answer_key(result.chosen_answer)
        chosen_correct = chosen is not None and verified.get(chosen, False)
        return GradedTree(
            problem_id, result, reference, "reference", labels, chosen_correct, verified
        )
    if pseudo_label == "prm_threshold":
        labels = {n.id: keys[n.id] is not None and n.q >= threshold for n in nodes}
    elif pseudo_label == "majority":
        winners = await _majority_answers(nodes, keys, timeout_s)
        labels = {n.id: keys[n.id] in winners for n in nodes}
    else:
        raise ValueError(f"unknown pseudo_label rule {pseudo_label!r}")
    return GradedTree(problem_id, result, None, pseudo_label, labels, None)


def answer_key(answer: str | None) -> str | None:
    if answer is None:
        return None
    key = normalize_answer(answer)
    return key or None


async def _majority_answers(
    nodes: Sequence[Node], keys: Mapping[int, str | None], timeout_s: float
) -> set[str]:
    """The answer strings of the largest math-verify-equivalence group."""
    groups: list[list[str]] = []  # first element: the representative
    count: dict[str, int] = {}
    best_q: dict[str, float] = {}
    for n in nodes:
        k = keys[n.id]
        if k is None:
            continue
        count[k] = count.get(k, 0) + 1
        best_q[k] = max(best_q.get(k, 0.0), n.q)
    for answer in count:  # first-reached order
        for group in groups:
            if await answers_match(answer, group[0], timeout_s):
                group.append(answer)
                break
        else:
            groups.append([answer])
    if not groups:
        return set()
    best = max(
        groups,
        key=lambda g: (sum(count[a] for a in g), max(best_q[a] for a in g)),
    )  # max() keeps the first group on full ties
    return set(best)


# --------------------------------------------------------------------------- rows
def node_rows(
    graded: GradedTree,
    *,
    run_id: str,
    policy_model: str | None = None,
    prm_model: str | None = None,
) -> list[Row]:
    """One `nodes` row per answered node, in answering order."""
    result = graded.result
    rows: list[Row] = []
    for n in graded.answered():
        label = graded.labels[n.id]
        rows.append(
            {
                "run_id": run_id,
                "problem_id": graded.problem_id,
                "node_id": n.id,
                "parent_id": n.parent_id,
                "trajectory": graded.trajectory(n),
                "answer": n.answer,
                "score": n.q,
                "correct": None if graded.pseudo else label,
                "label": label,
                "pseudo_label": graded.pseudo,
                "label_source": graded.label_source,
                "is_chosen": n.id == result.chosen_node_id,
                "depth": n.depth,
                "iteration": n.iteration,
                "c_used": n.c_used,
                "output_tokens": n.output_tokens,
                "finish": None if n.finish is None else n.finish.value,
                "method": result.algorithm,
                "policy_model": policy_model,
                "prm_model": prm_model,
                "budget": result.budget,
                "seed": result.seed,
            }
        )
    return rows


def tree_row(
    graded: GradedTree,
    *,
    run_id: str,
    policy_model: str | None = None,
    prm_model: str | None = None,
    contaminated: str | None = None,
) -> Row:
    """The `trees` row of one graded search."""
    result = graded.result
    tokens = result.tokens
    return {
        "run_id": run_id,
        "problem_id": graded.problem_id,
        "chosen_answer": result.chosen_answer,
        "chosen_node_id": result.chosen_node_id,
        "correct": graded.chosen_correct,
        "reference": graded.reference,
        "label_source": graded.label_source,
        "policy_output_tokens": tokens.policy_output,
        "policy_input_tokens": tokens.policy_input,
        "inserted_prompt_tokens": tokens.inserted_prompt,
        "prm_input_tokens": tokens.prm_input,
        "prm_output_tokens": tokens.prm_output,
        "c_used": result.c_used,
        "n_nodes": len(result.tree) - 1,
        "n_answered": len(graded.labels),
        "n_correct": sum(graded.labels.values()),
        "max_depth": result.tree.max_depth,
        "max_width": result.tree.max_width,
        "wall_time_s": result.wall_time_s,
        "stop_reason": result.stop_reason,
        "iterations": result.iterations,
        "contaminated": contaminated,
        "grade_timeouts": graded.grade_timeouts,
        "method": result.algorithm,
        "policy_model": policy_model,
        "prm_model": prm_model,
        "budget": result.budget,
        "seed": result.seed,
        "node_scores": [
            n.q
            for n in result.tree.nodes
            if n.id != 0 and n.error is None and n.finish not in _UNSCORED
        ],
        "trace": [
            {
                "c_used": float(p.c_used),
                "any_answer": p.any_answer,
                "correct": bool(graded.verified.get(answer_key(p.best_answer) or "", False)),
                "max_depth": p.max_depth,
                "max_width": p.max_width,
            }
            for p in result.trace
        ],
    }


def _user_turn(graded: GradedTree) -> list[dict[str, str]]:
    return policy_messages(graded.result.problem, "", graded.instruction)[:1]


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _unique(nodes: Iterable[Node], graded: GradedTree) -> list[Node]:
    """The first node of every distinct trajectory, order kept."""
    seen: set[str] = set()
    out: list[Node] = []
    for n in nodes:
        text = graded.trajectory(n)
        if text not in seen:
            seen.add(text)
            out.append(n)
    return out


def _answers_in_path(graded: GradedTree, node: Node) -> int:
    return len(answers_on_path(graded.result.tree, node))


def _select_paths(
    graded: GradedTree, nodes: Sequence[Node], dedupe: bool, self_correction: SelfCorrection
) -> list[tuple[Node, int]]:
    """(node, answers_in_path) of `nodes` after dedupe and the self-correction rule."""
    if self_correction not in ("exclude", "include", "only"):
        raise ValueError(f"unknown self_correction rule {self_correction!r}")
    picked = _unique(nodes, graded) if dedupe else list(nodes)
    counted = [(n, _answers_in_path(graded, n)) for n in picked]
    if self_correction == "exclude":
        return [(n, k) for n, k in counted if k == 1]
    if self_correction == "only":
        return [(n, k) for n, k in counted if k > 1]
    return counted


def sft_rows(
    graded: GradedTree,
    *,
    run_id: str,
    min_score: float = 0.0,
    dedupe: bool = True,
    self_correction: SelfCorrection = "exclude",
) -> list[Row]:
    """`sft` rows from the nodes labelled correct with Q >= `min_score`, best Q first.

    `self_correction` keeps clean paths only (``exclude``: the last node holds
    the path's only answer), every path (``include``), or only the paths that
    answered before (``only``).
    """
    picked = sorted(
        (n for n in graded.answered() if graded.labels[n.id] and n.q >= min_score),
        key=lambda n: (-n.q, n.id),
    )
    return [
        {
            "prompt": _user_turn(graded),
            "completion": _assistant(graded.trajectory(n)),
            "problem_id": graded.problem_id,
            "node_id": n.id,
            "answer": n.answer,
            "score": n.q,
            "depth": n.depth,
            "answers_in_path": answers,
            "label_source": graded.label_source,
            "run_id": run_id,
        }
        for n, answers in _select_paths(graded, picked, dedupe, self_correction)
    ]


# The pair search looks at |correct| x |incorrect| candidates: at most this many of
# each (the first in the rule's order) keep it bounded on very large trees.
PAIR_POOL = 64


def dpo_rows(
    graded: GradedTree,
    *,
    run_id: str,
    max_pairs_per_problem: int = 4,
    pairing: Pairing = "shared_prefix",
    seed: int = 0,
    pair_types: Iterable[PairType] = ("siblings", "cousins", "root"),
) -> list[Row]:
    """`dpo` pairs of one problem (rules in the module docstring)."""
    answered = graded.answered()
    tree = graded.result.tree
    good = _unique(
        sorted((n for n in answered if graded.labels[n.id]), key=lambda n: (-n.q, n.id)), graded
    )
    bad = _unique(
        sorted((n for n in answered if not graded.labels[n.id]), key=lambda n: (n.q, n.id)), graded
    )
    rng = random.Random(derive_seed(seed, "dpo", graded.problem_id))
    if pairing == "random":
        rng.shuffle(good)
        rng.shuffle(bad)
    elif pairing not in ("shared_prefix", "best_vs_worst"):
        raise ValueError(f"unknown pairing rule {pairing!r}")
    allowed = set(pair_types)
    candidates = [
        (c, r, div)
        for c in good[:PAIR_POOL]
        for r in bad[:PAIR_POOL]
        if (div := divergence(tree, c, r)).pair_type in allowed
    ]
    if pairing == "shared_prefix":
        candidates.sort(key=lambda t: (-t[2].shared_steps, t[1].q - t[0].q, t[0].id, t[1].id))
    elif pairing == "best_vs_worst":
        candidates.sort(key=lambda t: (t[1].q - t[0].q, t[0].id, t[1].id))
    else:
        rng.shuffle(candidates)
    pairs: list[tuple[Node, Node, Divergence]] = []
    used: set[int] = set()  # every node (so every trajectory) is used at most once
    for c, r, div in candidates:
        if len(pairs) >= max(0, max_pairs_per_problem):
            break
        if c.id not in used and r.id not in used:
            used.update((c.id, r.id))
            pairs.append((c, r, div))
    return [
        {
            "prompt": _user_turn(graded),
            "chosen": _assistant(graded.trajectory(c)),
            "rejected": _assistant(graded.trajectory(r)),
            "score_chosen": c.q,
            "score_rejected": r.q,
            "chosen_node_id": c.id,
            "rejected_node_id": r.id,
            "chosen_answer": c.answer,
            "rejected_answer": r.answer,
            "pair_type": div.pair_type,
            "shared_steps": div.shared_steps,
            "shared_prefix_chars": len(tree.assistant_text(div.ancestor)),
            "chosen_answers_in_path": _answers_in_path(graded, c),
            "rejected_answers_in_path": _answers_in_path(graded, r),
            "pairing": pairing,
            "label_source": graded.label_source,
            "problem_id": graded.problem_id,
            "run_id": run_id,
        }
        for c, r, div in pairs
    ]


def prm_rows(
    graded: GradedTree, *, run_id: str, dedupe: bool = True, pseudo_labels: bool = False
) -> list[Row]:
    """`prm` rows: one per answered path (distinct trajectory), labels from the subtree.

    Without a reference the labels would be pseudo labels (for ``prm_threshold``,
    the PRM's own scores): the record is then empty unless `pseudo_labels`.
    """
    if graded.pseudo and not pseudo_labels:
        return []
    tree = graded.result.tree
    below = subtree_answers(tree, graded.labels)
    rows: list[Row] = []
    for node, answers in _select_paths(graded, graded.answered(), dedupe, "include"):
        path = tree.path(node)
        labels: list[bool] = []
        values: list[float] = []
        for step in path:
            if step.answered:
                label = bool(graded.labels[step.id])
                labels.append(label)
                values.append(float(label))
            else:
                reached = below[step.id]  # never empty: `node` lies below every step
                labels.append(reached.correct > 0)
                values.append(reached.correct / reached.answered)
        rows.append(
            {
                "prompt": graded.result.problem,
                "completions": path_steps(tree, node),
                "labels": labels,
                "values": values,
                "step_node_ids": [step.id for step in path],
                "problem_id": graded.problem_id,
                "node_id": node.id,
                "answer": node.answer,
                "answers_in_path": answers,
                "label_source": graded.label_source,
                "run_id": run_id,
            }
        )
    return rows


def kto_rows(
    graded: GradedTree,
    *,
    run_id: str,
    dedupe: bool = True,
    self_correction: SelfCorrection = "exclude",
) -> list[Row]:
    """`kto` rows: every distinct answered trajectory (best Q first) with its label.

    The same self-correction rule as SFT applies to both labels, so desirable
    rows are the SFT rows (before `min_sft_score`).
    """
    ordered = sorted(graded.answered(), key=lambda n: (-n.q, n.id))
    return [
        {
            "prompt": _user_turn(graded),
            "completion": _assistant(graded.trajectory(n)),
            "label": bool(graded.labels[n.id]),
            "problem_id": graded.problem_id,
            "node_id": n.id,
            "answer": n.answer,
            "score": n.q,
            "answers_in_path": answers,
            "label_source": graded.label_source,
            "run_id": run_id,
        }
        for n, answers in _select_paths(graded, ordered, dedupe, self_correction)
    ]


def tree_node_rows(graded: GradedTree, *, run_id: str) -> list[Row]:
    """`tree_nodes` rows: every node of the tree, the root first (see TREE_NODES_SCHEMA)."""
    tree = graded.result.tree
    rows: list[Row] = []
    for n in tree.nodes:
        root = n.parent_id is None
        rows.append(
            {
                "run_id": run_id,
                "problem_id": graded.problem_id,
                "node_id": n.id,
                "parent_id": n.parent_id,
                "depth": n.depth,
                "d": n.d,
                "text": tree.problem if root else n.text,
                "inserted_text": tree.response_prefix if root else n.inserted_text,
                "q": n.q,
                "answered": n.answered,
                "answer": n.answer,
                "label": graded.labels.get(n.id) if n.answered else None,
                "finish": None if n.finish is None else n.finish.value,
                "output_tokens": n.output_tokens,
                "inserted_tokens": n.inserted_tokens,
                "c_used": n.c_used,
                "iteration": n.iteration,
                "from_generative": n.from_generative,
                "full_generation": n.full_generation,
                "error": n.error,
            }
        )
    return rows


def error_row(
    problem_id: str | None, stage: str, error: BaseException | str, *, run_id: str
) -> Row:
    """An `errors` row from an exception or a message."""
    if isinstance(error, BaseException):
        return {
            "problem_id": problem_id,
            "stage": stage,
            "error_type": type(error).__name__,
            "message": str(error) or type(error).__name__,
            "run_id": run_id,
        }
    return {
        "problem_id": problem_id,
        "stage": stage,
        "error_type": None,
        "message": error,
        "run_id": run_id,
    }


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
) -> dict[str, list[Row]]:
    """Grade one result and build every record type's rows with `config`.

    `instruction` is the policy's user-turn template (its `prompts.policy_instruction`):
    the sft/dpo/prm/kto prompts are built from it.

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
        )
    graded = replace(graded, grade_timeouts=grading.timeouts, instruction=instruction)
    models = {"policy_model": policy_model, "prm_model": prm_model}
    records: dict[str, list[Row]] = {
        "nodes": node_rows(graded, run_id=run_id, **models),
        "trees": [tree_row(graded, run_id=run_id, contaminated=contamination, **models)],
        "tree_nodes": tree_node_rows(graded, run_id=run_id),
    }
    if contamination is not None:
        return records
    records["sft"] = sft_rows(
        graded,
        run_id=run_id,
        min_score=config.min_sft_score,
        dedupe=config.dedupe,
        self_correction=config.sft.self_correction,
    )
    records["dpo"] = dpo_rows(
        graded,
        run_id=run_id,
        max_pairs_per_problem=config.max_pairs_per_problem,
        pairing=config.pairing,
        seed=config.seed,
        pair_types=config.dpo.pair_types,
    )
    records["prm"] = prm_rows(
        graded, run_id=run_id, dedupe=config.dedupe, pseudo_labels=config.prm.pseudo_labels
    )
    records["kto"] = kto_rows(
        graded, run_id=run_id, dedupe=config.dedupe, self_correction=config.sft.self_correction
    )
    return records


# --------------------------------------------------------------------------- tables
class RecordValidationError(ValueError):
    """A row does not fit its schema; names the record, the field and the row."""

    def __init__(self, record: str, field_name: str, row: int | None, reason: str) -> None:
        where = "" if row is None else f" (row {row})"
        super().__init__(f"{record} record: field {field_name!r}{where}: {reason}")
        self.record = record
        self.field = field_name
        self.row = row


_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def to_table(rows: Iterable[Mapping[str, Any]], schema: Any) -> Any:
    """Rows as a `pyarrow.Table` of exactly `schema`, checked field by field.

    Unknown fields, missing or null non-nullable fields, and values that do not
    convert to the field's type raise `RecordValidationError` naming the field
    and the row.  A missing nullable field is null.  Integer fields take only
    integers (pyarrow itself would truncate a float).
    """
    rows = list(rows)
    record = (schema.metadata or {}).get(b"record", b"record").decode()
    names = set(schema.names)
    for i, row in enumerate(rows):
        for key in row:
            if key not in names:
                raise RecordValidationError(record, str(key), i, "not in the schema")
    columns = []
    for f in schema:
        values = [row.get(f.name) for row in rows]
        if not f.nullable:
            for i, (row, value) in enumerate(zip(rows, values, strict=True)):
                if value is None:
                    reason = "missing" if f.name not in row else "null in a non-nullable field"
                    raise RecordValidationError(record, f.name, i, reason)
        if pa.types.is_integer(f.type):  # pyarrow would silently truncate 1.5 to 1
            for i, value in enumerate(values):
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, numbers.Integral)
                ):
                    raise RecordValidationError(record, f.name, i, f"{value!r:.80} is not {f.type}")
        try:
            columns.append(pa.array(values, type=f.type))
        except _ARROW_ERRORS as exc:
            for i, value in enumerate(values):
                try:
                    pa.array([value], type=f.type)
                except _ARROW_ERRORS as one:
                    raise RecordValidationError(
                        record, f.name, i, f"{value!r:.80} is not {f.type}: {one}"
                    ) from one
            raise RecordValidationError(record, f.name, None, str(exc)) from exc
    return pa.Table.from_arrays(columns, schema=schema)


__all__ = [
    "DPO_SCHEMA",
    "ERRORS_SCHEMA",
    "KTO_SCHEMA",
    "NODES_SCHEMA",
    "PRM_SCHEMA",
    "SCHEMAS",
    "SFT_SCHEMA",
    "TREES_SCHEMA",
    "TREE_NODES_SCHEMA",
    "GradedTree",
    "RecordValidationError",
    "RecordsConfig",
    "dpo_rows",
    "error_row",
    "grade_result",
    "kto_rows",
    "node_rows",
    "prm_rows",
    "records_for",
    "schema_markdown",
    "sft_rows",
    "to_table",
    "tree_node_rows",
    "tree_row",
]
