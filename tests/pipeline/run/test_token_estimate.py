"""The dry run's token estimate: what B caps, and where the scorer's estimate comes from."""

from __future__ import annotations

from actors.scorer_kinds import SCORER_KINDS
from pipeline.config import RunConfig, parse_run_config
from pipeline.run.scorer_model import model_estimate
from pipeline.run.token_estimate import Committed, estimate_tokens, token_rows
from search.scorer_kinds import GENPRM, ONE_PASS


def _config(**cost: float) -> RunConfig:
    return parse_run_config(
        {
            "budget": 1_000,
            "source": {"kind": "arithmetic", "count": 3},
            "search": {"algorithm": "bg_mcts", "cost": cost},
        }
    )


def test_a_new_run_bounds_policy_output_by_b_and_puts_the_scorer_outside_it() -> None:
    estimate = estimate_tokens(_config(), 10, Committed(), problem_chars=87.0)
    model = model_estimate(_config(), 87.0)
    assert model is not None
    assert estimate.policy_output_max == 10_000
    assert estimate.scorer == round(10_000 * model.tokens.per_budget_token)
    assert not estimate.scorer_in_budget
    assert estimate.policy_input is None  # no measured ratio: not guessed


def test_a_new_run_says_what_the_estimate_rests_on() -> None:
    """The model of path depth at this run's B, and what it was calibrated on."""
    estimate = estimate_tokens(_config(), 10, Committed())
    assert "model of path depth at B=1,000" in estimate.rests_on
    assert "calibrated on the simulated grid" in estimate.rests_on
    assert "the embedded default at B=300 and 1,000" in estimate.rests_on
    row = dict(token_rows(estimate, 10, 1_000))["scorer tokens (PRM in + out)"]
    assert "model of path depth at B=1,000" in row


def test_the_estimate_per_problem_grows_with_b() -> None:
    """The scorer re-reads each node's path, and paths get deeper as B grows: more scorer
    tokens per policy token, not just more policy tokens (from B of a few steps on: below
    that, the short steps the end of B cuts are most of the tree)."""
    per_token = []
    for budget in (1_000, 3_000, 10_000, 30_000):
        config = _config().model_copy(update={"budget": budget})
        estimate = estimate_tokens(config, 1, Committed())
        assert estimate.scorer is not None
        per_token.append(estimate.scorer / budget)
    assert per_token == sorted(per_token) and per_token[-1] > 1.5 * per_token[0], per_token


def test_charged_prm_tokens_are_inside_b_and_output_weight_scales_the_bound() -> None:
    estimate = estimate_tokens(_config(policy_output=2, prm_input=0.1), 10, Committed())
    assert estimate.policy_output_max == 5_000 and estimate.scorer_in_budget
    rows = dict(token_rows(estimate, 10, 1_000))
    assert "inside B (search.cost charges them)" in rows["scorer tokens (PRM in + out)"]
    free = estimate_tokens(_config(policy_output=0, prm_output=1), 10, Committed())
    assert free.policy_output_max is None and free.scorer is None
    assert "not capped by B" in dict(token_rows(free, 10, 1_000))["policy output tokens"]


def test_a_resumed_run_uses_its_own_trees_per_problem() -> None:
    totals = {
        "policy_input_tokens": 900,
        "prm_input_tokens": 5_000,
        "prm_output_tokens": 1_000,
        "prm_prompt_cached_tokens": 3_000,
    }
    estimate = estimate_tokens(_config(), 4, Committed(trees=3, totals=totals))
    assert estimate.scorer == 8_000 and estimate.policy_input == 1_200
    assert estimate.rests_on == "from this run's 3 committed trees: 2,000 per problem"
    # 3,000 of the 6,000 scorer tokens were read from its cache: 1,000 computed per problem
    assert estimate.scorer_computed == 4_000
    rows = dict(token_rows(estimate, 4, 300))
    assert rows["of those, computed by its engine"].startswith("~ 4,000 (the rest read")
    assert estimate_tokens(_config(), 4, Committed()).scorer_computed is None


def _one_pass(config: RunConfig) -> RunConfig:
    from actors.config import ScorerConfig
    from tests.actors.test_scorer_kinds import StepConfig

    return config.model_copy(update={"scorer": ScorerConfig(kind="one_pass", engine=StepConfig())})


def test_a_one_pass_scorer_reads_the_path_and_writes_nothing() -> None:
    one_pass = estimate_tokens(_one_pass(_config()), 10, Committed())
    genprm = estimate_tokens(_config(), 10, Committed())
    assert one_pass.scorer is not None and genprm.scorer is not None
    assert 10_000 < one_pass.scorer < genprm.scorer
    assert one_pass.rests_on.startswith("if every search spends B; one_pass: ~")


def test_a_search_the_model_does_not_cover_keeps_the_measured_ratio() -> None:
    sampling = parse_run_config(
        {
            "budget": 1_000,
            "source": {"kind": "arithmetic", "count": 3},
            "search": {"algorithm": "repeated_sampling"},
        }
    )
    estimate = estimate_tokens(_one_pass(sampling), 10, Committed())
    ratio = SCORER_KINDS[ONE_PASS].tokens_per_policy_token
    assert 1 < ratio < SCORER_KINDS[GENPRM].tokens_per_policy_token
    assert estimate.scorer == round(10_000 * ratio)
    assert "one_pass: ~3.6 per policy output token" in estimate.rests_on
    assert "measured with BG-MCTS" in estimate.rests_on
