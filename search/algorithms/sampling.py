"""The simplest width and depth baselines of the paper (Sec. 4.1), full-generation nodes.

* Repeated sampling: independent samples from the root until the budget is spent.
* Sequential refinement: one trajectory, each answer continued with the
  continuation prompt ("But wait, ...") until the budget is spent.
* Greedy: one generation at temperature 0.
"""

from __future__ import annotations

from search.algorithms.base import Expansion, SearchAlgorithm
from search.budget import Budget
from search.config import GreedyConfig, NodeUnit, RefinementConfig, RepeatedSamplingConfig
from search.tree import ROOT_ID, Node, Tree


class RepeatedSampling(SearchAlgorithm):
    name = "repeated_sampling"

    def __init__(self, config: RepeatedSamplingConfig) -> None:
        self.unit = config.node_unit

    @classmethod
    def from_config(cls, config: RepeatedSamplingConfig, seed: int = 0) -> RepeatedSampling:
        return cls(config)

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        return [Expansion(ROOT_ID, 1, self.unit)]


class SequentialRefinement(SearchAlgorithm):
    name = "refinement"

    def __init__(self, config: RefinementConfig) -> None:
        self.unit = config.node_unit
        self._tip = ROOT_ID

    @classmethod
    def from_config(cls, config: RefinementConfig, seed: int = 0) -> SequentialRefinement:
        return cls(config)

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        return [Expansion(self._tip, 1, self.unit)]

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:
        # A failed continuation is retried from the same tip instead of ending the chain.
        for child in children:
            if child.expandable:
                self._tip = child.id


class Greedy(SearchAlgorithm):
    name = "greedy"

    def __init__(self, config: GreedyConfig) -> None:
        self.unit = config.node_unit
        self.temperature = config.temperature

    @classmethod
    def from_config(cls, config: GreedyConfig, seed: int = 0) -> Greedy:
        return cls(config)

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        if tree.root.children:
            return []
        return [Expansion(ROOT_ID, 1, NodeUnit(self.unit), temperature=self.temperature)]
