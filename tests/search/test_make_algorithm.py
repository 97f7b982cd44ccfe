"""`make_algorithm` is a lookup: each search config names the class that builds it."""

from __future__ import annotations

from search.algorithms import make_algorithm
from search.algorithms.ab_mcts import ABMCTS
from search.algorithms.puct import PuctSearch, ReferenceMCTS
from search.config import ALGORITHMS, parse_search_config


def test_every_algorithm_builds_the_class_its_config_names() -> None:
    for name in ALGORITHMS:
        config = parse_search_config({"algorithm": name})
        algorithm = make_algorithm(config)
        assert type(algorithm).__name__ == config.builds.rsplit(":", 1)[1], name
        assert algorithm.name.startswith(name.removesuffix("_m").removesuffix("_a")), name
    reference = parse_search_config({"algorithm": "mcts", "conventions": "reference"})
    assert type(make_algorithm(reference)) is ReferenceMCTS
    bg = make_algorithm(parse_search_config({"algorithm": "bg_mcts", "conventions": "reference"}))
    assert type(bg) is PuctSearch and bg.name == "bg_mcts"


def test_ab_mcts_keeps_its_seed() -> None:
    config = parse_search_config({"algorithm": "ab_mcts_a"})

    def draws(seed: int) -> list[float]:
        algorithm = make_algorithm(config, seed=seed)
        assert isinstance(algorithm, ABMCTS) and algorithm._rng is not None
        return list(algorithm._rng.random_sample(3))

    assert draws(5) == draws(5) != draws(6)
