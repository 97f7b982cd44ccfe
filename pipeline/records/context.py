"""What every row builder takes besides the graded tree, and what a gated builder gives back.

* `BuildContext`: the records config (`records:`), the run id and the model names, one
  object instead of the config unpacked into keyword arguments at every call;
* `Built`: a gated builder's rows and what its gates did, each count in the unit its name
  says: ``dropped_paths`` (answered paths a gate kept out: ``"sft.truncated"`` -> 2),
  ``dropped_pairs`` (dpo and step_dpo pairs a pair gate kept out) and ``relabelled_steps``
  (prm steps a gate turned from good to bad; the row stays).  `gate_counts` puts the three
  side by side in ``trees.gate_drops``, and `gate_unit` reads a key's unit back from there;
* `BuildContext.shared_columns`: the columns every row of one problem holds the same
  value in (problem id, run id, split, label source, difficulty, reference), written
  once here for every record type;
* `note` and `watching`: which candidate each counted drop was (its answered node, or a
  pair's two), seen only by a caller that watches (`pipeline.records.dropped`); the
  counts and the rows are the same whether anyone watches or not.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.records.config import RecordsConfig
from pipeline.records.grading import GradedTree
from pipeline.records.schema import Row

# gate key ("<record>.<gate>", "<record>.<side>.<gate>") -> how many
Drops = Counter[str]
GateUnit = Literal["paths", "pairs", "steps"]

# The gates that judge a candidate pair of dpo or step_dpo (every other gate judges a path),
# and the one count of steps relabelled rather than rows kept out.  `gate_unit` reads
# ``trees.gate_drops`` with them; the builders name their keys with them.
PAIR_GATES = ("edit_distance", "q_margin", "rejected_step")
PRM_FALSE_EQUATION = "prm.false_equation"


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
    """One gated builder's rows of one problem and what its gates did, one unit per count."""

    rows: list[Row]
    # answered paths (one trajectory each) a gate kept out of this table
    dropped_paths: Drops = field(default_factory=Counter)
    # dpo and step_dpo: candidate pairs a pair gate kept out (both paths passed theirs)
    dropped_pairs: Drops = field(default_factory=Counter)
    # prm: steps a gate relabelled from good to bad; their rows stay in the table
    relabelled_steps: Drops = field(default_factory=Counter)


def count(drops: Drops, key: str, dropped: int) -> None:
    """Add `dropped` to gate `key` (nothing when nothing was dropped)."""
    if dropped > 0:
        drops[key] += dropped


# (gate key, node ids): one entry per path or pair kept out, or per prm step relabelled
Noted = list[tuple[str, tuple[int, ...]]]
# Where `note` writes while a caller watches one tree's rows being built; None (the run's
# own builds) makes `note` a no-op, so the builders' rows and counts never depend on it.
_WATCHING: ContextVar[Noted | None] = ContextVar("gate_witness", default=None)


def note(key: str, *node_ids: int) -> None:
    """Tell a watching caller that gate `key` kept out the candidate of `node_ids`: a
    path's answered node, a pair's (chosen, rejected), or a relabelled prm step's node.
    Every drop a builder counts is noted once, beside its `count`."""
    seen = _WATCHING.get()
    if seen is not None:
        seen.append((key, node_ids))


@contextlib.contextmanager
def watching() -> Iterator[Noted]:
    """The drops `note`d inside the block, in order (the block's own: a watcher inside
    another keeps its notes from the outer one)."""
    seen: Noted = []
    token = _WATCHING.set(seen)
    try:
        yield seen
    finally:
        _WATCHING.reset(token)


def gate_counts(built: Iterable[Built]) -> Drops:
    """Every count of `built` by key, as ``trees.gate_drops`` holds them: the keys of the
    three units never meet (`gate_unit` tells them apart), so nothing is added across units."""
    out: Drops = Counter()
    for b in built:
        out.update(b.dropped_paths)
        out.update(b.dropped_pairs)
        out.update(b.relabelled_steps)
    return out


def gate_unit(key: str) -> GateUnit:
    """What a ``trees.gate_drops`` key counts: ``paths`` kept out of a table, ``pairs`` kept
    out of dpo or step_dpo, or prm ``steps`` relabelled bad."""
    if key == PRM_FALSE_EQUATION:
        return "steps"
    record, _, gate = key.partition(".")
    if record in ("dpo", "step_dpo") and gate in PAIR_GATES:
        return "pairs"
    return "paths"


__all__ = [
    "PAIR_GATES",
    "PRM_FALSE_EQUATION",
    "BuildContext",
    "Built",
    "Drops",
    "GateUnit",
    "Noted",
    "count",
    "gate_counts",
    "gate_unit",
    "note",
    "watching",
]
