"""Summaries of finished searches used by tests, benchmarks and reports."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import mean

from search.driver import SearchResult


@dataclass(frozen=True, slots=True)
class PhaseStats:
    """Nodes created while C_used / B lay in one slice of the budget."""

    nodes: int
    mean_depth: float
    generative: int  # nodes created through the virtual generative child

    @property
    def generative_share(self) -> float:
        return self.generative / self.nodes if self.nodes else 0.0


def budget_phases(results: Iterable[SearchResult], phases: int = 3) -> list[PhaseStats]:
    """Depth and widening of new nodes per budget phase (thirds by default), pooled.

    A node belongs to the phase in which it was created, read from C_used at its
    creation; this is the wide-to-deep view of Sec. 3 and Fig. 5.
    """
    depths: list[list[int]] = [[] for _ in range(phases)]
    generative = [0] * phases
    for result in results:
        for node in result.tree.nodes[1:]:
            phase = min(phases - 1, int(phases * node.c_used / result.budget))
            depths[phase].append(node.depth)
            generative[phase] += node.from_generative
    return [
        PhaseStats(len(d), mean(d) if d else 0.0, g)
        for d, g in zip(depths, generative, strict=True)
    ]
