"""Algorithm objects: they decide, the driver generates (see `base`)."""

from __future__ import annotations

from search.algorithms.base import Expansion, SearchAlgorithm
from search.config import (
    ABMCTSConfig,
    BeamConfig,
    BGMCTSConfig,
    GreedyConfig,
    LiteSearchConfig,
    MCTSConfig,
    RefinementConfig,
    RepeatedSamplingConfig,
    SearchConfig,
)


def make_algorithm(config: SearchConfig, seed: int = 0) -> SearchAlgorithm:
    """A fresh algorithm object (one per search) for a validated config."""
    from search.algorithms import puct, sampling

    if isinstance(config, BGMCTSConfig):
        return puct.bg_mcts(config)
    if isinstance(config, MCTSConfig):
        return puct.mcts(config)
    if isinstance(config, RepeatedSamplingConfig):
        return sampling.RepeatedSampling(config)
    if isinstance(config, RefinementConfig):
        return sampling.SequentialRefinement(config)
    if isinstance(config, GreedyConfig):
        return sampling.Greedy(config)
    if isinstance(config, LiteSearchConfig):
        from search.algorithms.litesearch import LiteSearch

        return LiteSearch(config)
    if isinstance(config, BeamConfig):
        from search.algorithms.beam import BeamSearch

        return BeamSearch(config)
    if isinstance(config, ABMCTSConfig):
        from search.algorithms.ab_mcts import ABMCTS

        return ABMCTS(config, seed=seed)
    raise TypeError(f"no algorithm for config {type(config).__name__}")


__all__ = ["Expansion", "SearchAlgorithm", "make_algorithm"]
