"""`scorer.kind` picks the scorer and the engine it needs: one_pass a one-pass PRM engine,
genprm (and the policy) an engine that generates text; the replica builds the right
scorer, and its counting wrapper reports a one-pass PRM's calls and prompt tokens.

The one-pass engine here is defined by the test (an engine config class and its engine,
as `test_engine_factory` adds one): the real ones are their own modules' tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, get_args

import pytest

from actors.config import GenPRMSettings, ScorerConfig, ServiceConfig
from actors.engines.base import StepValues
from actors.engines.factory import build_engine
from actors.engines.load_model import LoadModelConfig
from actors.genprm import GenPRMScorer
from actors.one_pass import OnePassScorer
from actors.prompts import PromptConfig
from actors.scorer_kinds import SCORER_KINDS, build_scorer
from actors.serve import _CountingEngine
from pipeline.config import ConfigError, parse_run_config
from search.protocols import ScoreRequest
from search.scorer_kinds import DEFAULT_SCORER_KIND, GENPRM, ONE_PASS, SCORER_KIND_NAMES
from tests.actors.test_one_pass import StandInPRM


class StandInEngine(StandInPRM):
    """The test's one-pass engine, built from its config as the factory builds any."""


class StepConfig(LoadModelConfig):
    """A one-pass PRM engine config (as a real one declares itself: `scores_steps`)."""

    scores_steps: ClassVar[bool] = True

    def build(self) -> StandInEngine:  # type: ignore[override]
        return StandInEngine(name=f"stand-in:{self.model}", cached=2)


RUN = {
    "source": {"kind": "jsonl", "path": "problems.jsonl"},
    "search": {"algorithm": "bg_mcts"},
}


def test_a_one_pass_scorer_needs_a_one_pass_engine() -> None:
    config = ScorerConfig(kind="one_pass", engine=StepConfig(model="m"))
    assert config.kind == "one_pass" and config.engine.scores_steps
    with pytest.raises(ConfigError) as info:
        parse_run_config({**RUN, "scorer": {"kind": "one_pass"}})
    message = str(info.value)
    assert message == (
        "config: scorer: scorer.engine.kind='llamacpp' generates text; scorer.kind "
        "'one_pass' needs a one-pass PRM engine"
    )


def test_genprm_and_the_policy_refuse_a_one_pass_engine() -> None:
    with pytest.raises(ValueError, match=r"scorer\.engine\.kind='load_model' scores steps"):
        ScorerConfig(kind="genprm", engine=StepConfig())
    with pytest.raises(ConfigError) as info:
        parse_run_config({**RUN, "policy": ServiceConfig(engine=StepConfig())})
    assert str(info.value) == (
        "config: policy: policy.engine.kind='load_model' scores steps (a one-pass PRM) and "
        "generates no text; the policy needs an engine that generates text"
    )
    assert "\n" not in str(info.value)


def test_every_kind_the_config_allows_is_one_registered_object() -> None:
    """The names are written once (`search.scorer_kinds`); the config allows exactly those,
    each has its `ScorerKind`, and each kind's settings are the config field of its name."""
    assert get_args(ScorerConfig.model_fields["kind"].annotation) == SCORER_KIND_NAMES
    assert tuple(SCORER_KINDS) == SCORER_KIND_NAMES
    assert ScorerConfig().kind == DEFAULT_SCORER_KIND
    for kind in SCORER_KINDS.values():
        assert kind.settings_field in ScorerConfig.model_fields
    # what a score writes after the path: GenPRM its analysis, a one-pass PRM nothing
    genprm = ScorerConfig(genprm={"max_analysis_tokens": 77})
    assert SCORER_KINDS[GENPRM].decodes and SCORER_KINDS[GENPRM].analysis_tokens(genprm) == 77
    one_pass = ScorerConfig(kind=ONE_PASS, engine=StepConfig())
    assert not SCORER_KINDS[ONE_PASS].decodes
    assert SCORER_KINDS[ONE_PASS].analysis_tokens(one_pass) == 0


async def test_the_replica_builds_the_scorer_of_its_kind_and_counts_its_tokens() -> None:
    config = ScorerConfig(kind="one_pass", engine=StepConfig(model="m"))
    engine = _CountingEngine(build_engine(config.engine))
    scorer = build_scorer(config, engine)
    assert isinstance(scorer, OnePassScorer) and scorer.name == "one_pass:stand-in:m"
    for path in ((" a",), (" a", "\nStep 2: b c")):
        await scorer.score(ScoreRequest("p q", path, None, False, None, False, 1e9))
    stats = engine.stats()
    # words: prompt 2, then "Step 1: a" 3 + its separator; "Step 2: b c" 4 + 1
    assert stats["engine_calls"] == 2
    assert stats["engine_prompt_tokens"] == (2 + 4) + (2 + 4 + 5)
    assert stats["engine_cached_prompt_tokens"] == 2 * 2
    assert stats["engine_output_tokens"] == 0
    load = engine.load()  # admission reads the hit rate from these counters
    assert (load.prompt_tokens, load.cached_prompt_tokens) == (17, 4)
    # GenPRM samples as `scorer.genprm` says, the whole settings object (no copies of its
    # defaults elsewhere to drift), with the config's own system turn
    generating = ScorerConfig(
        engine=LoadModelConfig(),
        genprm=GenPRMSettings(samples=2, top_k=None, prm_after_answer="restart"),
        prompts=PromptConfig(prm_system="Judge each step."),
    )
    genprm = build_scorer(generating, _CountingEngine(build_engine(generating.engine)))
    assert isinstance(genprm, GenPRMScorer)
    assert genprm.settings == generating.genprm
    assert genprm.system_prompt == "Judge each step."
    assert GenPRMScorer(genprm.engine).settings == GenPRMSettings()


async def test_a_step_call_that_raises_still_leaves_the_engine_idle() -> None:
    class Broken(StandInPRM):
        async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
            raise RuntimeError("boom")

    engine: Any = _CountingEngine(Broken())
    with pytest.raises(RuntimeError):
        await engine.score_steps("p", ["a"])
    assert (engine.calls, engine.inflight) == (1, 0)
