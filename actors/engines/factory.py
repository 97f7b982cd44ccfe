"""Build an engine from its config, with a clear error before any Ray work starts.

Nothing here names an engine kind: each config builds its own engine (`build`) and says
which packages that needs and, for a one-pass PRM, where its vocabulary is found before the
engine is built (`actors.engines.base.EngineConfigBase`), so a new engine is one module.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from actors.engines.base import Package
from actors.engines.configs import EngineConfig
from actors.engines.step_layout import (
    CheckpointLayoutError,
    SeparatorError,
    Tokenize,
    TrainedLayout,
    separator_id,
)
from actors.errors import EngineError


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


def engine_vocabulary(config: EngineConfig) -> Tokenize | None:
    """The tokenizer of `config`'s model as its engine will load it, where it can be looked
    at from here (the function its config names: `actors.engines.vocabulary`); None where
    it cannot."""
    if config.vocabulary is None:
        return None
    module, _, name = config.vocabulary.partition(":")
    tokenizer: Tokenize | None = getattr(importlib.import_module(module), name)(config)
    return tokenizer


def check_step_separator(config: EngineConfig, separator: str) -> None:
    """A one-pass PRM's step separator must be one token of its model's vocabulary
    (`step_layout.separator_id`, the check its engine makes when it loads), refused here
    before a run starts where the vocabulary can be looked at; one line naming the field."""
    tokenize = engine_vocabulary(config)
    if tokenize is None:
        return
    try:
        separator_id(tokenize, separator)
    except SeparatorError as exc:
        raise EngineError(
            f"one_pass.step_separator={separator!r}: {exc}", field="one_pass.step_separator"
        ) from None


def check_trained_layout(config: EngineConfig, served: Any) -> None:
    """A checkpoint that `bgmcts train-prm` wrote says how it laid paths out
    (`TrainedLayout`); serving it with another separator, prompt format or step split
    (`served`, the scorer's `one_pass` settings) reads values where the model learned
    none, so that is refused, naming the field.  (Another checkpoint says nothing, and
    nothing is checked.)"""
    model = getattr(config, "model", None)
    if not isinstance(model, str):
        return
    try:
        trained = TrainedLayout.read(model)
    except CheckpointLayoutError as exc:
        raise EngineError(f"engine.model: {exc}", field="engine.model") from None
    differs = None if trained is None else trained.mismatch(served)
    if differs is not None:
        name, served_value, learned = differs
        raise EngineError(
            f"one_pass.{name}={served_value!r}: the checkpoint {model} was trained with "
            f"{learned!r} ({TrainedLayout.FILE}); serve it as it was trained",
            field=f"one_pass.{name}",
        )


def build_engine(config: EngineConfig, **options: Any) -> Any:
    """The engine of `config`, checked first (`check_engine`); `options` go to its
    `build` (a one-pass engine's `step_separator`, which is the scorer's setting, not
    the engine's)."""
    check_engine(config)
    return config.build(**options)
