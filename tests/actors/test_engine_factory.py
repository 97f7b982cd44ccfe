"""The engine factory knows no engine kind: each config builds its engine and names its
packages.

Every config in the `engine:` union builds its own engine; a config class with a `build`
in a module of its own is all a new engine needs (an engine defined here shows it); and
reading configs imports no model package (vLLM, torch, xllamacpp, httpx): only building
an engine does, on the nodes that run it.
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

from actors.engines.base import Package
from actors.engines.configs import EngineConfig
from actors.engines.factory import build_engine, check_engine, missing_packages
from actors.engines.load_model import LoadModelConfig, LoadModelEngine
from actors.errors import EngineError

REPO = Path(__file__).resolve().parents[2]


def test_every_engine_config_builds_an_engine_of_its_own_module() -> None:
    configs = get_args(get_args(EngineConfig)[0])
    assert len(configs) == 8
    for config in configs:
        built = config.build.__annotations__["return"]
        engine_class = getattr(importlib.import_module(config.__module__), built)
        assert engine_class.__module__ == config.__module__, config.__name__


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
    config = LoadModelConfig(
        model="m",
        decode_base_ms=2.0,
        decode_per_context_token_ns=5.0,
        cache_tokens=1024,
        output_tokens=4,
        output_tokens_max=9,
        slow_marker="slow",
        seed=3,
    )
    engine = build_engine(config)
    assert isinstance(engine, LoadModelEngine) and engine.name == "m"
    curve = engine.batcher.curve
    assert curve.decode_base_s == pytest.approx(0.002)
    assert curve.decode_per_context_token_s == pytest.approx(5e-9)
    assert engine.batcher.cache.capacity_tokens == 1024
    assert engine.config is config


def test_an_inverted_length_range_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match=r"output_tokens_max \(4\) must be >= output_tokens"):
        LoadModelConfig(output_tokens=8, output_tokens_max=4)


class EchoEngine(LoadModelEngine):
    """A new engine: one class built from its config, in its own module (this one)."""

    def __init__(self, config: EchoConfig) -> None:
        super().__init__(config)
        self.name = f"echo:{config.model}"


class EchoConfig(LoadModelConfig):
    def build(self) -> EchoEngine:
        return EchoEngine(self)


class NeedsConfig(LoadModelConfig):
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
        "engine.kind='load_model' needs the 'no_such_module_here' package: pip install no-such"
    )


def test_reading_configs_imports_no_model_package() -> None:
    """The driver reads and checks the configs without vLLM, torch, xllamacpp or httpx
    (each engine imports them when it is built, in its replica); building a search
    algorithm imports only its own module."""
    code = (
        "import json, sys\n"
        "import actors.config, pipeline.config\n"
        "from actors.engines.factory import build_engine\n"
        "from actors.engines.load_model import LoadModelConfig\n"
        "from search import make_algorithm, parse_search_config\n"
        "build_engine(LoadModelConfig())\n"
        "make_algorithm(parse_search_config({'algorithm': 'bg_mcts'}))\n"
        "prefixes = ('vllm', 'torch', 'transformers', 'xllamacpp', 'httpx', 'treequest',"
        " 'search.algorithms.')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(prefixes))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "search.algorithms.puct" in loaded
    assert "search.algorithms.ab_mcts" not in loaded and "treequest" not in loaded
    for package in ("vllm", "torch", "transformers", "xllamacpp", "httpx"):
        assert not any(m == package or m.startswith(f"{package}.") for m in loaded), package
