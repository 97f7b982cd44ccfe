"""Build an engine from its config, with a clear error before any Ray work starts.

Nothing here names an engine kind: each config class says which class builds it and which
packages that needs (`actors.config._Engine`), so a new engine is a config class and a module.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from actors.config import EngineConfig, Package, ScorerConfig
from actors.engines.base import Engine, EngineError


def missing_packages(config: EngineConfig) -> list[Package]:
    """The packages `config`'s engine imports that are not installed here."""
    return [p for p in config.packages if importlib.util.find_spec(p.module) is None]


def check_engine(config: EngineConfig) -> None:
    """Fail fast, naming the field, when the engine package or model file is missing."""
    missing = missing_packages(config)
    if missing:
        module, install = missing[0]
        raise EngineError(
            f"engine.kind={config.kind!r} needs the {module!r} package: pip install {install}"
        )
    config.check_model()  # raises for a model file that must be here; a warning is no error


def check_step_separator(config: ScorerConfig) -> None:
    """A one-pass scorer's `step_separator` must be one token of its model's vocabulary
    (the engine config looks where the model is here); one line naming the field."""
    if config.kind != "one_pass":
        return
    separator = config.one_pass.step_separator
    try:
        config.engine.check_step_separator(separator)
    except ValueError as exc:
        raise EngineError(f"one_pass.step_separator={separator!r}: {exc}") from None


# What `bgmcts train-prm` writes beside a checkpoint: how it laid the paths out.
TRAINED_LAYOUT = "bgmcts_prm.json"


def check_trained_layout(config: ScorerConfig) -> None:
    """A checkpoint that `bgmcts train-prm` wrote says how it laid paths out; serving it
    with another separator, prompt format or step split reads values where the model
    learned none, so that is refused, naming the field.  (Another checkpoint says
    nothing, and nothing is checked.)"""
    model = getattr(config.engine, "model", None)
    if config.kind != "one_pass" or not isinstance(model, str):
        return
    path = Path(model).expanduser() / TRAINED_LAYOUT
    if not path.is_file():
        return
    try:
        trained = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not ours to judge: the engine reads the checkpoint, not this file
    for name in ("step_separator", "prompt_format", "steps"):
        served, learned = getattr(config.one_pass, name), trained.get(name)
        if learned is not None and served != learned:
            raise EngineError(
                f"one_pass.{name}={served!r}: the checkpoint {model} was trained with "
                f"{learned!r} ({TRAINED_LAYOUT}); serve it as it was trained"
            )


def check_one_pass_layout(config: ScorerConfig) -> None:
    """A one-pass scorer's step separator (`check_step_separator`) and, for a checkpoint
    `bgmcts train-prm` wrote, the layout it was trained on (`check_trained_layout`)."""
    check_step_separator(config)
    check_trained_layout(config)


def check_scorer_engine(config: ScorerConfig) -> None:
    """`check_engine`, and a one-pass scorer's layout (`check_one_pass_layout`)."""
    check_engine(config.engine)
    check_one_pass_layout(config)


def build_engine(config: EngineConfig, **options: Any) -> Engine:
    """The engine of `config`; `options` go to its `from_config` (a one-pass engine's
    step separator, which is the scorer's setting, not the engine's)."""
    check_engine(config)
    module, _, name = config.builds.partition(":")
    # imported only now: vLLM's module is imported on the nodes that build a vLLM engine
    engine: Engine = getattr(importlib.import_module(module), name).from_config(config, **options)
    return engine


def build_scorer_engine(config: ScorerConfig) -> Any:
    """The engine of a scorer: a one-pass PRM's is built with the scorer's step separator,
    which it lays every path out with (`actors.engines.step_layout`)."""
    if config.engine.scores_steps:
        return build_engine(config.engine, step_separator=config.one_pass.step_separator)
    return build_engine(config.engine)
