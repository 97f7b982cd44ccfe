"""Each scorer kind (`scorer.kind`) as one object: everything the services and the reports
need to know about it, so that nothing else decides by the kind's name.

A kind says how its scorer is built on an engine (`build`), what is checked before a run
starts beyond the engine itself (`check`: a one-pass PRM's step separator and the layout
its checkpoint was trained on), how many tokens a score may write after the path
(`analysis_tokens`, which admission adds to a scorer sequence's context), how many scorer
tokens a run spends per policy output token (the dry run's estimate, with where it was
measured), and how the run report names it.

The names themselves, and the layer-free fact of whether a kind decodes, live in
`search.scorer_kinds`; the settings of each kind are the `ScorerConfig` field of the same
name (`scorer.genprm`, `scorer.one_pass`).  A new kind is a name there, a settings field in
`actors.config` and one `ScorerKind` here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.config import ScorerConfig
from actors.engines.factory import (
    build_engine,
    check_engine,
    check_step_separator,
    check_trained_layout,
)
from search.protocols import Scorer
from search.scorer_kinds import GENPRM, ONE_PASS, ScorerKindName, decodes


@dataclass(frozen=True)
class ScorerKind:
    """One scorer kind: how it is built, checked, estimated and named."""

    name: ScorerKindName
    # The kind in a sentence ("a one-pass PRM"), and what it is and does, for the run
    # report's Totals.
    what: str
    description: str
    # Scorer tokens (PRM prompt + generated) per policy output token, and where that was
    # measured: the dry run's estimate for a run that has no committed trees of its own.
    tokens_per_policy_token: float
    measured: str
    # The scorer of this kind on `engine` (an engine `ScorerConfig` already matched to it).
    build: Callable[[ScorerConfig, Any], Scorer]
    # Refuses, before a run starts, what the engine check cannot see (EngineError).
    check: Callable[[ScorerConfig], None]
    # The most tokens one score writes after the path (0 for a kind that decodes nothing).
    analysis_tokens: Callable[[ScorerConfig], int]

    @property
    def decodes(self) -> bool:
        """Whether it writes output tokens (and so needs an engine that generates text)."""
        return decodes(self.name)

    @property
    def settings_field(self) -> str:
        """The `ScorerConfig` field that holds this kind's settings: the kind's own name."""
        return self.name


def _genprm(config: ScorerConfig, engine: Any) -> Scorer:
    # imported when a replica builds its scorer, not by every module that names a kind
    from actors.genprm import GenPRMScorer

    return GenPRMScorer(engine, config.genprm, system_prompt=config.prompts.prm_system)


def _one_pass(config: ScorerConfig, engine: Any) -> Scorer:
    from actors.one_pass import OnePassScorer

    return OnePassScorer(engine, config.one_pass)


def check_one_pass_layout(config: ScorerConfig) -> None:
    """A one-pass scorer's step separator (one token of its model's vocabulary) and, for a
    checkpoint `bgmcts train-prm` wrote, the layout it was trained on: what the one-pass
    kind checks before a run starts."""
    check_step_separator(config.engine, config.one_pass.step_separator)
    check_trained_layout(config.engine, config.one_pass)


def _nothing_more(config: ScorerConfig) -> None:
    """GenPRM reads any text: its engine's own check is all there is to check."""


_KINDS = (
    ScorerKind(
        name=GENPRM,
        what="GenPRM",
        description="GenPRM, a generative PRM: writes an analysis and a judgement per step",
        # BG-MCTS on the embedded default (SmolLM2-135M as policy and as GenPRM scorer on
        # llama.cpp, 48 arithmetic problems, B = 300) used 231,056 scorer tokens for 11,493
        # policy output tokens (docs/benchmarks.md, "Data value: held-out gain",
        # 2026-11-26).  A larger GenPRM on longer solutions may differ: a resumed run
        # measures its own.
        tokens_per_policy_token=231_056 / 11_493,
        measured="measured with BG-MCTS on the embedded default, docs/benchmarks.md "
        "'Data value: held-out gain'",
        build=_genprm,
        check=_nothing_more,
        analysis_tokens=lambda config: config.genprm.max_analysis_tokens,
    ),
    ScorerKind(
        name=ONE_PASS,
        what="a one-pass PRM",
        description="a one-pass PRM: reads each path once, decodes nothing",
        # It reads the prompt and the node's whole path once per scored node and decodes
        # nothing.  BG-MCTS on the embedded default with the one-pass PRM trained from the
        # pipeline's own trees (32 held-out arithmetic problems, B = 300, the CPU engine
        # with no prefix cache): 27,625 scorer tokens for 7,689 policy output tokens
        # (docs/benchmarks.md, "Scorer value", 2026-11-27).  Deeper trees (larger B) read
        # more.
        tokens_per_policy_token=27_625 / 7_689,
        measured="measured with BG-MCTS on the embedded default, docs/benchmarks.md 'Scorer value'",
        build=_one_pass,
        check=check_one_pass_layout,
        # its context is the path alone: nothing is written after it
        analysis_tokens=lambda config: 0,
    ),
)

# Every kind by its name, in the order `search.scorer_kinds` lists them.
SCORER_KINDS: Mapping[str, ScorerKind] = {kind.name: kind for kind in _KINDS}


def scorer_kind(config: ScorerConfig) -> ScorerKind:
    """The kind `config` names (the config's own validation allows no other)."""
    return SCORER_KINDS[config.kind]


def build_scorer(config: ScorerConfig, engine: Any) -> Scorer:
    """The scorer of `config.kind` on `engine` (a `StepScoringEngine` for one_pass, a
    generating `Engine` for genprm: `ScorerConfig` refuses the other pairs)."""
    return scorer_kind(config).build(config, engine)


def build_scorer_engine(config: ScorerConfig) -> Any:
    """The engine of a scorer: a one-pass PRM's is built with the scorer's step separator,
    which it lays every path out with (`actors.engines.step_layout`)."""
    if config.engine.scores_steps:
        return build_engine(config.engine, step_separator=config.one_pass.step_separator)
    return build_engine(config.engine)


def check_scorer_engine(config: ScorerConfig) -> None:
    """Refuse, naming the field, a scorer this machine cannot build: its engine
    (`check_engine`: package, model files) and what its kind checks beyond that."""
    check_engine(config.engine)
    scorer_kind(config).check(config)


__all__ = [
    "SCORER_KINDS",
    "ScorerKind",
    "build_scorer",
    "build_scorer_engine",
    "check_one_pass_layout",
    "check_scorer_engine",
    "scorer_kind",
]
