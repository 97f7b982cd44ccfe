"""The engine factory knows no engine kind: each config names its class and packages.

Every config's `builds` must import and build; a config class and a module of its own are
all a new engine needs (an engine defined here shows it); and building one engine imports
no other engine's module (vLLM's only on the nodes that run it).
"""

from __future__ import annotations

import importlib
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, get_args

import pytest

from actors.config import EngineConfig, LoadModelConfig, Package, SleepConfig
from actors.engines.factory import build_engine, check_engine, missing_packages
from actors.engines.load_model import LoadModelEngine
from actors.engines.sleep import SleepEngine
from actors.errors import EngineError

REPO = Path(__file__).resolve().parents[2]


def test_every_engine_config_names_a_class_that_builds_from_it() -> None:
    configs = get_args(get_args(EngineConfig)[0])
    assert len(configs) == 9
    for config in configs:
        module, _, name = config.builds.partition(":")
        engine_class = getattr(importlib.import_module(module), name)
        assert callable(engine_class.from_config), config.__name__


def test_an_engine_error_keeps_the_field_it_concerns_across_processes() -> None:
    """A replica's error reaches the driver pickled; the field must come with it."""
    sent = EngineError("engine.model: /x is not a folder here", field="engine.model")
    received = pickle.loads(pickle.dumps(sent))
    assert (str(received), received.field) == (str(sent), "engine.model")
    assert EngineError("no field").field is None


def test_every_one_pass_engine_config_names_where_its_vocabulary_is_found() -> None:
    """A step-scoring engine's config names the function that finds its vocabulary before
    the engine is built (None only where it cannot be looked at: a remote server's)."""
    configs = get_args(get_args(EngineConfig)[0])
    named = {c.__name__: c.vocabulary for c in configs if c.scores_steps}
    assert named == {
        "VLLMPoolingConfig": "actors.engines.vocabulary:model_folder",
        "OpenAIPoolingConfig": None,
        "TransformersPRMConfig": "actors.engines.vocabulary:model_folder",
        "LoadModelPRMConfig": "actors.engines.vocabulary:words",
    }
    for vocabulary in filter(None, named.values()):
        module, _, name = vocabulary.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), vocabulary
    assert not any(c.vocabulary for c in configs if not c.scores_steps)


def test_fields_reach_the_engine() -> None:
    sleep = build_engine(SleepConfig(model="s", latency_s=0.5, output_tokens=7, seed=3))
    assert isinstance(sleep, SleepEngine)
    assert (sleep.name, sleep.latency_s, sleep.output_tokens, sleep.seed) == ("s", 0.5, 7, 3)
    config = LoadModelConfig(
        decode_base_ms=2.0,
        decode_per_context_token_ns=5.0,
        cache_tokens=1024,
        output_tokens=4,
        output_tokens_max=9,
        slow_marker="slow",
    )
    engine = build_engine(config)
    assert isinstance(engine, LoadModelEngine) and engine.name == "load-model"
    curve = engine.batcher.curve
    assert curve.decode_base_s == pytest.approx(0.002)
    assert curve.decode_per_context_token_s == pytest.approx(5e-9)
    assert engine.batcher.cache.capacity_tokens == 1024 and engine.slow_marker == "slow"
    assert engine.answers.output_tokens_max == 9


def test_an_inverted_length_range_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match=r"output_tokens_max \(4\) must be >= output_tokens"):
        LoadModelConfig(output_tokens=8, output_tokens_max=4)


class EchoEngine(SleepEngine):
    """A new engine: one class with `from_config` in its own module (this one)."""

    @classmethod
    def from_config(cls, config: SleepConfig) -> EchoEngine:
        return cls(name=f"echo:{config.model}")


class EchoConfig(SleepConfig):
    builds: ClassVar[str] = f"{__name__}:EchoEngine"


class NeedsConfig(SleepConfig):
    packages: ClassVar[tuple[Package, ...]] = (Package("no_such_module_here", "no-such"),)


def test_a_new_engine_is_a_config_class_and_a_module() -> None:
    engine = build_engine(EchoConfig(model="m"))
    assert isinstance(engine, EchoEngine) and engine.name == "echo:m"
    needs = NeedsConfig()
    assert [str(p) for p in missing_packages(needs)] == [
        "no_such_module_here (pip install no-such)"
    ]
    with pytest.raises(EngineError) as info:
        check_engine(needs)
    assert str(info.value) == (
        "engine.kind='sleep' needs the 'no_such_module_here' package: pip install no-such"
    )


def test_building_an_engine_imports_no_other_engine() -> None:
    code = (
        "import json, sys\n"
        "from actors.config import SleepConfig\n"
        "from actors.engines.factory import build_engine\n"
        "from search import make_algorithm, parse_search_config\n"
        "build_engine(SleepConfig())\n"
        "make_algorithm(parse_search_config({'algorithm': 'bg_mcts'}))\n"
        "prefixes = ('actors.engines.', 'vllm', 'treequest', 'search.algorithms.')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(prefixes))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "actors.engines.sleep" in loaded and "search.algorithms.puct" in loaded
    for other in ("vllm_engine", "llamacpp", "openai_compat", "load_model", "transformers_prm"):
        assert f"actors.engines.{other}" not in loaded
    assert "search.algorithms.ab_mcts" not in loaded and "treequest" not in loaded
    assert not any(m == "vllm" or m.startswith("vllm.") for m in loaded)
