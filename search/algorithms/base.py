"""What an algorithm decides, separated from what the driver does.

An algorithm object holds one search's decision state.  Each step the driver
asks it for expansions (`propose`), generates and scores the children, adds
them to the tree (which backpropagates m, W, D), and tells the algorithm
(`observe`).  Generation, the budget and the clock belong to the driver.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from search.budget import Budget
from search.config import NodeUnit
from search.tree import Node, Tree


@dataclass(frozen=True, slots=True)
class Expansion:
    """Generate `n` children of `node_id` in one request (n choices)."""

    node_id: int
    n: int
    unit: NodeUnit
    from_generative: bool = False
    temperature: float | None = None  # None: the config's temperature


class SearchAlgorithm(abc.ABC):
    name: str = "search"

    @classmethod
    def from_config(cls, config: Any, seed: int = 0) -> SearchAlgorithm:
        """A fresh algorithm (one per search) for the validated config whose `builds` names
        this class; `seed` matters to the algorithms that draw random numbers (AB-MCTS)."""
        raise NotImplementedError(f"{cls.__name__} is not built from a search config")

    @abc.abstractmethod
    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        """The next expansions, run concurrently; an empty list ends the search."""

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:  # noqa: B027
        """Called once per expansion after its children are scored and added."""

    def should_stop(self, tree: Tree, budget: Budget) -> bool:
        """Early stop (App. C / App. I) before the budget is spent."""
        return False
