"""`preference_pools`: the gated chosen and rejected candidates that dpo and step_dpo pair.

Correct trajectories (chosen candidates, best Q first) and incorrect ones (rejected
candidates, worst Q first), both through the training gates (`select_paths`): no
truncated text, no chosen text with a false equation or a low step value (the process
gates, `gates.false_equation` and `gates.min_step_value`: step_dpo's chosen step sits on
that whole path), the self-correction rule (`records.self_correction`; by default no
trace), no (near) duplicate (always deduplicated: the best-Q copy of a correct one, the
worst-Q copy of an incorrect one); the rejected side also never states the reference
(`gates.rejected_states_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.records.config import GatesConfig, SelfCorrection
from pipeline.records.context import Drops
from pipeline.records.grading import GradedTree
from pipeline.records.trajectories import select_paths
from search.tree import Node


@dataclass(frozen=True, slots=True)
class Pools:
    """The two sides' candidates after the gates, and what each gate dropped."""

    chosen: list[Node]
    rejected: list[Node]
    drops: Drops


def preference_pools(
    graded: GradedTree, gates: GatesConfig, record: str, self_correction: SelfCorrection
) -> Pools:
    """Both sides' candidates; drops counted under ``<record>.chosen.<gate>`` and
    ``<record>.rejected.<gate>``."""
    answered = graded.answered()
    good = sorted((n for n in answered if graded.labels[n.id]), key=lambda n: (-n.q, n.id))
    bad = sorted((n for n in answered if not graded.labels[n.id]), key=lambda n: (n.q, n.id))
    chosen, chosen_drops = select_paths(
        graded, good, True, self_correction, record=f"{record}.chosen", gates=gates
    )
    rejected, rejected_drops = select_paths(
        graded, bad, True, self_correction, record=f"{record}.rejected", gates=gates
    )
    return Pools([n for n, _ in chosen], [n for n, _ in rejected], chosen_drops + rejected_drops)


__all__ = ["Pools", "preference_pools"]
