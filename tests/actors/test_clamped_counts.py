"""Engine answers whose token counts had to be clamped are counted per engine and fault,
on their way to the run summary (`actors.progress`).

The engines are real: the model-free load models, told to report more prompt tokens
served from their cache than they were sent (`cached_over_sent`, a setting for tests).
The policy and both scorer kinds are the ones a Serve replica builds, a real search runs
on them, and the counters go through the progress board's own class (the Ray actor's
code, called in this process: no cluster is needed for what is checked).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.config import ScorerConfig
from actors.engines.base import Sampling
from actors.engines.factory import build_engine
from actors.engines.load_model import LoadModelConfig, LoadModelEngine
from actors.policy import EnginePolicy
from actors.progress import (
    Counters,
    CountingPolicy,
    CountingScorer,
    ProgressBoard,
    clamped_counts,
)
from actors.scorer_kinds import build_scorer, build_scorer_engine
from search import parse_search_config, run_search
from search.config import CostWeights
from search.protocols import COUNT_FAULTS, ClampedCounts

# hardly any waiting: the curve is not what is checked
CURVE: dict[str, Any] = {"decode_base_ms": 0.1, "decode_per_seq_ms": 0.0}
FAST: dict[str, Any] = {**CURVE, "output_tokens": 8}
SEARCH = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 16})


def _scorer(kind: str, over: int) -> Any:
    # a one-pass PRM decodes nothing: its load model has no output length
    engine = (
        {"kind": "load_model_prm", **CURVE}
        if kind == "one_pass"
        else {"kind": "load_model", **FAST}
    )
    config = ScorerConfig.model_validate(
        {
            "kind": kind,
            "engine": {**engine, "cached_over_sent": over},
            "genprm": {"max_analysis_tokens": 8},
        }
    )
    return build_scorer(config, build_scorer_engine(config))


def _search(over: int, scorer_kind: str) -> tuple[dict[str, Any], Any]:
    """One real search, counted as a search actor counts it; the board's snapshot."""
    engine = build_engine(LoadModelConfig(**FAST, cached_over_sent=over))
    counters = Counters()
    policy = CountingPolicy(EnginePolicy(engine), counters, CostWeights())
    scorer = CountingScorer(_scorer(scorer_kind, over), counters, CostWeights())
    result = asyncio.run(run_search("What is 6 times 7?", SEARCH, policy, scorer, 120, seed=1))
    board = ProgressBoard()
    board.add(counters.take())  # what a search actor's reporter pushes
    return board.snapshot(), result


@pytest.mark.parametrize("scorer_kind", ["genprm", "one_pass"])
def test_each_answer_an_engine_counted_wrong_is_counted_per_engine_and_fault(
    scorer_kind: str,
) -> None:
    # before, the only trace was a warning in the replica's log, gone with the cluster
    snapshot, result = _search(3, scorer_kind)
    generations = len(result.tree) - 1  # every child is one engine answer of the policy
    policy = clamped_counts(snapshot, "policy")
    assert policy == ClampedCounts(answers=generations, cached_above_sent=generations)
    scorer = clamped_counts(snapshot, "prm")
    assert scorer.answers > 0 and scorer.answers == scorer.cached_above_sent
    assert scorer.negative == scorer.not_a_number == 0
    if scorer_kind == "one_pass":  # one engine answer per score
        assert scorer.answers == result.tokens.scorer_requests
    else:  # GenPRM: an analysis and a judgement per step scored, each an answer
        assert scorer.answers >= 2 * result.tokens.scorer_requests
    # the counts the search and the trees table see are the clamped ones
    assert result.tokens.policy_prompt_cached_tokens == result.tokens.policy_prompt_sent_tokens
    assert result.tokens.prm_prompt_cached_tokens == result.tokens.prm_input_tokens


def test_an_engine_with_counts_that_can_be_adds_nothing() -> None:
    snapshot, _ = _search(0, "one_pass")
    assert not clamped_counts(snapshot, "policy") and not clamped_counts(snapshot, "prm")
    assert clamped_counts({}, "policy") == ClampedCounts()  # a board before any push


def test_counts_add_up_answer_by_answer_and_a_fault_once_per_answer() -> None:
    one = ClampedCounts.of({"negative", "cached_above_sent"})
    assert one == ClampedCounts(answers=1, cached_above_sent=1, negative=1)
    assert ClampedCounts.of(()) == ClampedCounts() and not ClampedCounts()
    total = one + ClampedCounts.of(["not_a_number"])
    assert total == ClampedCounts(2, 1, 1, 1)
    # the fault names are the fields: an engine cannot record one the run cannot count
    assert set(COUNT_FAULTS) == set(ClampedCounts.__dataclass_fields__) - {"answers"}
    with pytest.raises(ValueError, match="unknown count faults"):
        ClampedCounts.of({"too_many"})
    counters, board = Counters(), ProgressBoard()
    counters.count_clamped("policy", total)
    board.add(counters.take())
    counters.count_clamped("policy", one)
    board.add(counters.take())  # two pushes: deltas, summed on the board
    assert clamped_counts(board.snapshot(), "policy") == total + one
    assert not counters.take()  # taken: nothing left to push


def test_the_load_models_lie_only_when_told_to() -> None:
    sampling = Sampling(max_tokens=8, stop=("\nStep",), temperature=0.0, seed=0)
    honest = build_engine(LoadModelConfig(**FAST))
    lying = build_engine(LoadModelConfig(**FAST, cached_over_sent=5))
    assert isinstance(honest, LoadModelEngine) and isinstance(lying, LoadModelEngine)
    fine = asyncio.run(honest.complete("user: hi there", sampling))
    told = asyncio.run(lying.complete("user: hi there", sampling))
    assert fine.count_faults == frozenset() and fine.cached_tokens <= fine.input_tokens
    # reported 3 + 5 cached of 3 sent: clamped as the answer was made, and said
    assert told.count_faults == {"cached_above_sent"}
    assert told.cached_tokens == told.input_tokens == 3
