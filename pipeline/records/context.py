"""What every row builder takes besides the graded tree, and what a gated builder gives back.

* `BuildContext`: the records config (`records:`), the run id and the model names, one
  object instead of the config unpacked into keyword arguments at every call;
* `Built`: a gated builder's rows and what each of its gates dropped (``"sft.truncated"``
  -> 2), summed into ``trees.gate_drops``;
* `BuildContext.shared_columns`: the columns every row of one problem holds the same
  value in (problem id, run id, split, label source, difficulty, reference), written
  once here for every record type.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.records.config import RecordsConfig
from pipeline.records.grading import GradedTree
from pipeline.records.schema import Row

Drops = Counter[str]


@dataclass(frozen=True, slots=True)
class BuildContext:
    """The records config and the run a problem's rows are written for."""

    config: RecordsConfig = field(default_factory=RecordsConfig)
    run_id: str = ""
    policy_model: str | None = None
    prm_model: str | None = None

    def shared_columns(self, graded: GradedTree, schema: Any) -> Row:
        """The columns of `schema` that every row of `graded`'s problem holds the same."""
        values: Row = {
            "problem_id": graded.problem_id,
            "run_id": self.run_id,
            "split": graded.split,
            "label_source": graded.label_source,
            "difficulty": graded.difficulty,
            "reference": graded.reference,
        }
        return {name: value for name, value in values.items() if name in schema.names}


@dataclass(frozen=True, slots=True)
class Built:
    """One gated builder's rows of one problem and what each of its gates dropped."""

    rows: list[Row]
    drops: Drops = field(default_factory=Counter)


def count(drops: Drops, key: str, dropped: int) -> None:
    """Add `dropped` to gate `key` (nothing when nothing was dropped)."""
    if dropped > 0:
        drops[key] += dropped


__all__ = ["BuildContext", "Built", "Drops", "count"]
