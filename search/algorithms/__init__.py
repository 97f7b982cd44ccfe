"""Algorithm objects: they decide, the driver generates (see `base`)."""

from __future__ import annotations

import importlib

from search.algorithms.base import Expansion, SearchAlgorithm
from search.config import SearchConfig


def make_algorithm(config: SearchConfig, seed: int = 0) -> SearchAlgorithm:
    """A fresh algorithm object (one per search) for a validated config: the class its
    `builds` names (imported only now: AB-MCTS's module is loaded by AB-MCTS runs only)."""
    module, _, name = config.builds.partition(":")
    algorithm: SearchAlgorithm = getattr(importlib.import_module(module), name).from_config(
        config, seed=seed
    )
    return algorithm


__all__ = ["Expansion", "SearchAlgorithm", "make_algorithm"]
