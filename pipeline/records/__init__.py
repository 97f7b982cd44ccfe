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

The modules, in layers: each imports only modules listed above it.

* `tree_paths` - questions about paths in one tree (answers on a path, where two
  paths part, what a subtree reached);
* `config` - `RecordsConfig` (the run config's ``records:``) and its parts;
* `schema` - `doc_field`, `record_schema`, the shared fields, `to_table`,
  `RecordValidationError`, `schema_markdown`;
* `training_text` - the text a training row holds: cut after the answer
  statement, ``truncated`` when the token cap cut that sentence;
* `splits` - `split_of`, the held-out split of a problem (hashed on its id);
* `grading` - `grade_result` labels every answered node (reference or pseudo
  labels; the rules are there: an answer whose comparison timed out is left ungraded,
  no label and no row) into a `GradedTree`; `grade_for_records` does so
  under a `RecordsConfig`, the training prompt and the split included;
* `context` - what every builder takes (`BuildContext`: the config, the run id, the
  model names) and a gated builder gives back (`Built`: rows, and what its gates did, one
  unit per count: paths dropped, pairs dropped, steps relabelled; `gate_unit` reads the
  unit of a ``trees.gate_drops`` key), and the columns every row of a problem shares;
* `trajectories` - what the training builders share: chat turns, (near) duplicates,
  questions about one path;
* `paths` - `GatedPaths`: a tree's answered paths judged by every gate once, from which
  each training table picks its candidates and counts its own drops, and the gated
  chosen and rejected pools that `dpo` and `step_dpo` pair;
* one module per record type, its schema next to its builder: `nodes`, `trees`,
  `sft`, `dpo`, `step_dpo`, `prm`, `kto`, `tree_nodes`, `errors` (each training module's
  docstring holds its rules);
* `types` - `SCHEMAS`, the one list of record types, `RECORD_TYPES`, `TRAINING_TYPES`;
* `yields` - the data yield of a search, read off its built rows (its columns, which
  `trees` and `eval_trees` share and the data-yield tables sum, live in `schema`);
* `spec` - `RecordsSpec`: what a tree's records are built with besides its result and
  reference (the problem and run ids, the config, the models, the contamination, the
  policy's prompt, the answer extraction), one object for every entry below;
* `build` - `records_for`: one result graded and turned into every record type
  (and what decontamination removes), the paths gated once, each builder run once;
* `problem_trees` - a problem searched by more than one tree (the night allocator's probe
  and second tree): `forest` joins them under one root, `further_rows` keeps a later
  tree's rows that are no near duplicate of the committed ones, within the per-problem caps;
* `rebuild` - `rebuild_result`, a `SearchResult` rebuilt from its ``tree_nodes``
  and ``trees`` rows (the tests' real-model fixture), and `rebuild_records`, a run's
  every record type built again from those rows under a records config (to relabel an
  old run, or to see what other gates would have kept).
* `dropped` - `rows_and_drops`: `rows_for` watched, each drop it counted named with the
  candidate it kept out (the tree explorer shows them on the nodes), and
  `explain_stored_tree`, the same for a tree a run stored.

Everything here is pure (no file I/O, no Ray); a sink writes the tables.
"""

from __future__ import annotations

from pipeline.records.build import records_for, rows_for
from pipeline.records.config import (
    DpoConfig,
    GatesConfig,
    Pairing,
    PrmConfig,
    PseudoLabel,
    RecordsConfig,
    SelfCorrection,
    TrainingPromptConfig,
)
from pipeline.records.context import BuildContext, Built, gate_unit
from pipeline.records.dpo import DPO_SCHEMA, PAIR_POOL, dpo_rows
from pipeline.records.errors import ERRORS_SCHEMA, error_row
from pipeline.records.grading import (
    GradedTree,
    LabelSource,
    answer_key,
    grade_for_records,
    grade_result,
)
from pipeline.records.kto import KTO_SCHEMA, kto_rows
from pipeline.records.nodes import NODES_SCHEMA, node_rows
from pipeline.records.paths import GatedPaths
from pipeline.records.prm import PRM_SCHEMA, prm_rows
from pipeline.records.rebuild import rebuild_records, rebuild_result
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
from pipeline.records.sft import SFT_SCHEMA, sft_candidates, sft_rows
from pipeline.records.spec import RecordsSpec
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
    "BuildContext",
    "Built",
    "DpoConfig",
    "GatedPaths",
    "GatesConfig",
    "GradedTree",
    "LabelSource",
    "Pairing",
    "PrmConfig",
    "PseudoLabel",
    "RecordValidationError",
    "RecordsConfig",
    "RecordsSpec",
    "Row",
    "SelfCorrection",
    "TrainingPromptConfig",
    "TrainingText",
    "answer_key",
    "doc_field",
    "dpo_rows",
    "error_row",
    "gate_unit",
    "grade_for_records",
    "grade_result",
    "kto_rows",
    "node_rows",
    "prm_rows",
    "rebuild_records",
    "rebuild_result",
    "record_schema",
    "records_for",
    "rows_for",
    "schema_markdown",
    "sft_candidates",
    "sft_rows",
    "split_of",
    "step_dpo_rows",
    "to_table",
    "training_text",
    "tree_node_rows",
    "tree_row",
    "yield_counts",
]
