"""`GatedPaths`: every answered path of one tree judged by the training gates once.

Every training table (sft, dpo, step_dpo, prm, kto) takes its rows from the answered
paths of one tree, through the same gates (`records.gates`) and the same
self-correction rule (`records.self_correction`).  Judging a path is the costly part
(the false-equation check parses every equation of its text), so a tree's paths are
judged once, here, and each table then picks its candidates from the verdicts, in its
own order, and counts its own drops.  Every drop `select` counts is one path kept out.

A path meets the gates in this order, and a table counts it under the first it fails:

* ``ungraded`` (always): the path's answer has no label, its comparison with the
  reference was cut off by the time limit (`pipeline.records.grading`): it is neither a
  positive nor a negative example.  sft, dpo and step_dpo, which take their candidates
  by label, count these paths under the same name (``dpo.ungraded``);
* ``empty_step`` (always): a step of no text but white space (`Node.empty`, an engine
  that answered with nothing) is never a training row;
* ``truncated`` (`drop_truncated`) and ``no_statement`` (`require_statement`: the text
  states no answer);
* the process gates of correct paths: ``false_equation`` (`false_equation`: the text
  states arithmetic that does not hold) and ``low_step_value`` (`min_step_value`: a node
  on the path has a Q below it);
* ``duplicate`` (the table's own: which copy is kept depends on the table's order);
  near duplicates by `gates.near_duplicate`;
* ``self_correction``: an earlier node on the path answered or its training text states
  more than one answer (``exclude`` drops those paths, ``only`` keeps only them);
* ``states_reference`` (`rejected_states_reference`): an incorrect path whose text states
  the reference, or an answer whose comparison with it was cut off (it may be the
  reference).

The prm table leaves the process gates and ``states_reference`` open (`prm` says why);
no table may leave the first four open (a path that fails one of them is not judged by
the process gates at all: it is out of every table already).

`GatedPaths.pools` are the gated chosen and rejected candidates that dpo and step_dpo
pair: correct paths best Q first, incorrect ones worst Q first, each side deduplicated
on its own (the best-Q copy of a correct one, the worst-Q copy of an incorrect one) even
without ``records.dedupe``.  They are chosen once per tree, and each of the two tables
counts their drops under its own name (``dpo.chosen.truncated``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pipeline.records.config import RecordsConfig
from pipeline.records.context import BuildContext, Drops, Noted, count, note, watching
from pipeline.records.equations import states_false_equation
from pipeline.records.grading import GradedTree
from pipeline.records.trajectories import (
    answers_in_path,
    distinct_trajectories,
    has_empty_step,
    lowest_step_value,
)
from search.tree import Node

# the gates a table may leave open: the process gates and the rejected side's reference
# check; every other gate keeps a path out of every training table
OPENABLE = frozenset({"false_equation", "low_step_value", "states_reference"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """One answered path judged by every gate: its answers and the gates it fails."""

    answers: int  # answered nodes on the path (`answers_in_path`)
    # the gates it fails that apply before deduplication, then those after it, in order
    before_dedupe: tuple[str, ...]
    after_dedupe: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Pools:
    """The two sides' candidates after the gates, and the paths each gate kept out."""

    chosen: list[Node]
    rejected: list[Node]
    dropped_paths: Drops


class GatedPaths:
    """The answered paths of one graded tree, each judged once under one records config."""

    __slots__ = ("_pools", "config", "graded", "verdicts")
    _pools: tuple[list[Node], list[Node], Drops, Noted] | None

    def __init__(self, graded: GradedTree, config: RecordsConfig) -> None:
        if config.self_correction not in ("exclude", "include", "only"):
            raise ValueError(f"unknown self_correction rule {config.self_correction!r}")
        self.graded = graded
        self.config = config
        self.verdicts = {n.id: self._judge(n) for n in graded.answered()}
        self._pools = None

    def _judge(self, node: Node) -> Verdict:
        graded, gates = self.graded, self.config.gates
        tree = graded.result.tree
        text = graded.training(node)
        correct = graded.label(node)  # None: ungraded
        before: list[str] = []
        if correct is None:
            before.append("ungraded")
        if has_empty_step(tree, node):
            before.append("empty_step")
        if gates.drop_truncated and text.truncated:
            before.append("truncated")
        if gates.require_statement and text.statements == 0:
            before.append("no_statement")
        # the process gates: a correct path is a good example only when its steps are; a
        # wrong path is a bad example whatever its steps, so the negative side is left alone.
        # A path already out of every table is not parsed (the costliest check)
        if correct and not before:
            if gates.false_equation and states_false_equation(text.text):
                before.append("false_equation")
            floor = gates.min_step_value
            if floor is not None and lowest_step_value(tree, node) < floor:
                before.append("low_step_value")
        answers = answers_in_path(graded, node)
        many = text.statements > 1
        after: list[str] = []
        rule = self.config.self_correction
        if (rule == "exclude" and (answers != 1 or many)) or (
            rule == "only" and not (answers > 1 or many)
        ):
            after.append("self_correction")
        if (
            gates.rejected_states_reference
            and correct is False
            and (node.id in graded.states_reference or node.id in graded.may_state_reference)
        ):
            after.append("states_reference")
        return Verdict(answers, tuple(before), tuple(after))

    def select(
        self,
        nodes: Iterable[Node],
        record: str,
        *,
        dedupe: bool | None = None,
        near_duplicate: float | None = None,
        open_gates: frozenset[str] = frozenset(),
    ) -> tuple[list[tuple[Node, int]], Drops]:
        """(node, answers_in_path) of the answered `nodes` that pass, in their order, and
        the paths each gate kept out, counted as ``<record>.<gate>``.

        `dedupe` and `near_duplicate` default to the config's (`records.dedupe`,
        `gates.near_duplicate`); `open_gates` (a subset of `OPENABLE`) are not applied.
        """
        if not open_gates <= OPENABLE:
            raise ValueError(f"only {sorted(OPENABLE)} can be left open, not {open_gates}")
        dedupe = self.config.dedupe if dedupe is None else dedupe
        if near_duplicate is None:
            near_duplicate = self.config.gates.near_duplicate
        drops: Drops = Counter()

        def passed(
            nodes: Iterable[Node], failed: Callable[[Verdict], tuple[str, ...]]
        ) -> list[Node]:
            """The nodes that fail none of their `failed` gates that are applied; a dropped
            path is counted under the first it fails, as if the gates ran one after another."""
            kept = []
            for n in nodes:
                gates = failed(self.verdicts[n.id])
                first = next((gate for gate in gates if gate not in open_gates), None)
                if first is None:
                    kept.append(n)
                else:
                    drops[f"{record}.{first}"] += 1
                    note(f"{record}.{first}", n.id)
            return kept

        picked = passed(nodes, lambda v: v.before_dedupe)
        if dedupe:
            distinct = distinct_trajectories(picked, self.graded, near_duplicate)
            count(drops, f"{record}.duplicate", len(picked) - len(distinct))
            kept = {n.id for n in distinct}
            for n in picked:
                if n.id not in kept:
                    note(f"{record}.duplicate", n.id)
            picked = distinct
        picked = passed(picked, lambda v: v.after_dedupe)
        return [(n, self.verdicts[n.id].answers) for n in picked], drops

    def pools(self, record: str) -> Pools:
        """The chosen and rejected candidates (the module docstring says which), their
        drops counted as ``<record>.chosen.<gate>`` and ``<record>.rejected.<gate>``."""
        if self._pools is None:
            labels = self.graded.labels
            answered = [n for n in self.graded.answered() if n.id in labels]
            good = ordered([n for n in answered if labels[n.id]])
            bad = sorted((n for n in answered if not labels[n.id]), key=lambda n: (n.q, n.id))
            # the pools are judged once but counted by each table that pairs them: what
            # they kept out is noted again under each table's name, below
            with watching() as noted:
                chosen, chosen_drops = self.select(good, "chosen", dedupe=True)
                rejected, rejected_drops = self.select(bad, "rejected", dedupe=True)
                drops = chosen_drops + rejected_drops + ungraded_paths(self.graded, "")
            self._pools = ([n for n, _ in chosen], [n for n, _ in rejected], drops, noted)
        chosen_nodes, rejected_nodes, drops, noted = self._pools
        for key, node_ids in noted:
            note(f"{record}.{key}", *node_ids)
        # fresh lists: a table may reorder its candidates (dpo's random pairing shuffles)
        return Pools(
            list(chosen_nodes),
            list(rejected_nodes),
            Counter({f"{record}.{key}": n for key, n in drops.items()}),
        )


def gated(graded: GradedTree, context: BuildContext, paths: GatedPaths | None) -> GatedPaths:
    """`paths` when given (`rows_for` judges a tree's paths once for every table), else the
    paths of `graded` judged now (a builder called on its own)."""
    if paths is None:
        return GatedPaths(graded, context.config)
    if paths.graded is not graded or paths.config != context.config:
        raise ValueError("these paths were judged for another tree or another records config")
    return paths


def ungraded_paths(graded: GradedTree, record: str) -> Drops:
    """The answered paths without a label (their comparison was cut off), counted as
    ``<record>.ungraded`` (no record: ``ungraded``): the drops of a table that takes its
    candidates by label, and so never meets them in `GatedPaths.select`."""
    drops: Drops = Counter()
    key = f"{record}.ungraded" if record else "ungraded"
    count(drops, key, len(graded.ungraded))
    for node_id in sorted(graded.ungraded):
        note(key, node_id)
    return drops


def ordered(nodes: Sequence[Node]) -> list[Node]:
    """`nodes` best Q first (ties: the older node first), the order sft and kto keep."""
    return sorted(nodes, key=lambda n: (-n.q, n.id))


__all__ = ["OPENABLE", "GatedPaths", "Pools", "Verdict", "gated", "ordered", "ungraded_paths"]
