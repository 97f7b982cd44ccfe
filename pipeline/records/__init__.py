"""Graded search trees as flat records: the Parquet schemas and the pure functions that fill them.

Nine record types (`SCHEMAS`, in `types`), one `pyarrow.Schema` each (every
field carries its own ``description`` in the field metadata; `schema_markdown`
renders them for docs/records.md):

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
* ``step_dpo`` (`STEP_DPO_SCHEMA`) - step-level pairs in Step-DPO's columns
  (``prompt``, ``initial_reason_steps``, ``chosen``, ``rejected``,
  ``full_chosen``, ``full_rejected``, ``answer``);
* ``tree_nodes`` (`TREE_NODES_SCHEMA`) - every node of every tree, so any
  relabelling or analysis can be redone from Parquet alone;
* ``errors`` (`ERRORS_SCHEMA`) - a problem (or a source) that failed, and where.

The modules, each importing only those above it:

* `config` - `RecordsConfig` (the run config's ``records:``) and its parts;
* `tree_paths` - questions about paths in one tree (answers on a path, where two
  paths part, what a subtree reached);
* `schema` - `doc_field`, `record_schema`, the shared fields, `to_table`,
  `RecordValidationError`, `schema_markdown`;
* `grading` - `grade_result` labels every answered node (reference or pseudo
  labels; the rules are there) into a `GradedTree`;
* `training_text` - the text a training row holds: cut after the answer
  statement, ``truncated`` when the token cap cut that sentence;
* `splits` - `split_of`, the held-out split of a problem (hashed on its id);
* `trajectories` - what the training builders share: chat turns, (near)
  duplicates, the self-correction rule and the gates' drop counts;
* one module per record type, its schema next to its builder: `nodes`, `trees`,
  `sft`, `dpo`, `step_dpo`, `prm`, `kto`, `tree_nodes`, `errors` (each training module's
  docstring holds its rules);
* `types` - `SCHEMAS`, the one list of record types, `RECORD_TYPES`, `TRAINING_TYPES`;
* `yields` - `yield_counts`, a search's data yield (its columns, which `trees` and
  `eval_trees` share and the data-yield tables sum, live in `schema`);
* `build` - `records_for`: one result graded and turned into every record type
  (and what decontamination removes).

Everything here is pure (no file I/O, no Ray); a sink writes the tables.
"""

from __future__ import annotations

from pipeline.records.build import records_for
from pipeline.records.config import (
    DpoConfig,
    GatesConfig,
    Pairing,
    PrmConfig,
    PseudoLabel,
    RecordsConfig,
    SelfCorrection,
    SftConfig,
    TrainingPromptConfig,
)
from pipeline.records.dpo import DPO_SCHEMA, PAIR_POOL, dpo_rows
from pipeline.records.errors import ERRORS_SCHEMA, error_row
from pipeline.records.grading import GradedTree, LabelSource, answer_key, grade_result
from pipeline.records.kto import KTO_SCHEMA, kto_rows
from pipeline.records.nodes import NODES_SCHEMA, node_rows
from pipeline.records.prm import PRM_SCHEMA, prm_rows
from pipeline.records.schema import (
    MESSAGE_TYPE,
    MESSAGES_TYPE,
    SCHEMA_VERSION,
    TRACE_POINT,
    RecordValidationError,
    Row,
    doc_field,
    record_schema,
    schema_markdown,
    to_table,
)
from pipeline.records.sft import SFT_SCHEMA, sft_rows
from pipeline.records.splits import split_of
from pipeline.records.step_dpo import STEP_DPO_SCHEMA, step_dpo_rows
from pipeline.records.training_text import TrainingText, training_text
from pipeline.records.tree_nodes import TREE_NODES_SCHEMA, tree_node_rows
from pipeline.records.trees import TREES_SCHEMA, tree_row
from pipeline.records.types import RECORD_TYPES, SCHEMAS, TRAINING_TYPES
from pipeline.records.yields import NO_YIELD, YIELD_COUNTS, YIELD_FIELDS, yield_counts

__all__ = [
    "DPO_SCHEMA",
    "ERRORS_SCHEMA",
    "KTO_SCHEMA",
    "MESSAGES_TYPE",
    "MESSAGE_TYPE",
    "NODES_SCHEMA",
    "NO_YIELD",
    "PAIR_POOL",
    "PRM_SCHEMA",
    "RECORD_TYPES",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "SFT_SCHEMA",
    "STEP_DPO_SCHEMA",
    "TRACE_POINT",
    "TRAINING_TYPES",
    "TREES_SCHEMA",
    "TREE_NODES_SCHEMA",
    "YIELD_COUNTS",
    "YIELD_FIELDS",
    "DpoConfig",
    "GatesConfig",
    "GradedTree",
    "LabelSource",
    "Pairing",
    "PrmConfig",
    "PseudoLabel",
    "RecordValidationError",
    "RecordsConfig",
    "Row",
    "SelfCorrection",
    "SftConfig",
    "TrainingPromptConfig",
    "TrainingText",
    "answer_key",
    "doc_field",
    "dpo_rows",
    "error_row",
    "grade_result",
    "kto_rows",
    "node_rows",
    "prm_rows",
    "record_schema",
    "records_for",
    "schema_markdown",
    "sft_rows",
    "split_of",
    "step_dpo_rows",
    "to_table",
    "training_text",
    "tree_node_rows",
    "tree_row",
    "yield_counts",
]
