"""The one list of record types: `SCHEMAS` (name -> schema), in the order a run writes them.

`RECORD_TYPES` is its names (the sink's folders, a run summary's row counts);
`TRAINING_TYPES` the ones a trainer reads, which the Hub lists first
(`pipeline.publish.hub.CONFIGS`) and a contaminated problem never gives.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.dpo import DPO_SCHEMA
from pipeline.records.errors import ERRORS_SCHEMA
from pipeline.records.kto import KTO_SCHEMA
from pipeline.records.nodes import NODES_SCHEMA
from pipeline.records.prm import PRM_SCHEMA
from pipeline.records.sft import SFT_SCHEMA
from pipeline.records.step_dpo import STEP_DPO_SCHEMA
from pipeline.records.tree_nodes import TREE_NODES_SCHEMA
from pipeline.records.trees import TREES_SCHEMA

SCHEMAS: Mapping[str, pa.Schema] = {
    "nodes": NODES_SCHEMA,
    "trees": TREES_SCHEMA,
    "sft": SFT_SCHEMA,
    "dpo": DPO_SCHEMA,
    "step_dpo": STEP_DPO_SCHEMA,
    "prm": PRM_SCHEMA,
    "kto": KTO_SCHEMA,
    "tree_nodes": TREE_NODES_SCHEMA,
    "errors": ERRORS_SCHEMA,
}
RECORD_TYPES: tuple[str, ...] = tuple(SCHEMAS)
TRAINING_TYPES: tuple[str, ...] = ("sft", "dpo", "step_dpo", "prm", "kto")

__all__ = ["RECORD_TYPES", "SCHEMAS", "TRAINING_TYPES"]
