"""What a `kind: vllm` config hands vLLM, checked without vLLM installed.

`VLLMEngine` builds `AsyncEngineArgs` from its config's fields; here vLLM's
module is a recorder, so the test sees exactly the keyword arguments vLLM would get.
(tests/vllm/test_vllm_engine.py checks with the real vLLM that `max_num_seqs` becomes
the engine's batch.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from actors.engines import vllm_engine
from actors.engines.vllm_engine import VLLMConfig, VLLMEngine, vllm_engine_args
from actors.errors import EngineError


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every `AsyncEngineArgs` built while the test runs."""
    calls: list[dict[str, Any]] = []

    def engine_args(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return kwargs

    fake = SimpleNamespace(
        AsyncEngineArgs=engine_args,
        AsyncLLMEngine=SimpleNamespace(
            from_engine_args=lambda args, stat_loggers=None: SimpleNamespace()
        ),
        SamplingParams=object,
    )
    monkeypatch.setattr(vllm_engine, "import_vllm", lambda: fake)
    # The recorder has no `vllm.v1.metrics`: with Ray up in this process (an earlier test's
    # cluster, when every tier runs in one session) the engine would import vLLM's Ray stat
    # logger.  tests/vllm/test_vllm_engine.py checks those loggers with the real vLLM.
    monkeypatch.setattr(vllm_engine, "ray_stat_loggers", lambda: None)
    return calls


def test_config_fields_reach_vllms_engine_args(seen: list[dict[str, Any]]) -> None:
    config = VLLMConfig(
        model="org/model",
        max_model_len=16384,
        gpu_memory_utilization=0.85,
        max_num_seqs=256,
        seed=7,
        dtype="bfloat16",
        engine_args={"enforce_eager": True},
    )
    engine = VLLMEngine(config)
    assert engine.name == "model" and engine.context_length == 16384
    assert seen == [
        {
            "model": "org/model",
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.85,
            "max_model_len": 16384,
            "dtype": "bfloat16",
            "enable_prefix_caching": True,
            "seed": 7,
            "max_num_seqs": 256,
            "enforce_eager": True,
        }
    ]


def test_no_max_num_seqs_leaves_vllms_default(seen: list[dict[str, Any]]) -> None:
    VLLMEngine(VLLMConfig(model="org/model"))
    assert "max_num_seqs" not in seen[0]
    VLLMEngine(
        VLLMConfig(model="org/model", engine_args={"max_num_seqs": 16, "enforce_eager": True})
    )
    assert (seen[1]["max_num_seqs"], seen[1]["enforce_eager"]) == (16, True)


def test_a_key_set_twice_is_refused(seen: list[dict[str, Any]]) -> None:
    """By the config, when it is read (tests/test_engine_config_checks.py: the dry run), and
    by `vllm_engine_args` for what a caller adds."""
    with pytest.raises(ValidationError, match="max_num_seqs is a field of its own here"):
        VLLMConfig(model="org/model", max_num_seqs=64, engine_args={"max_num_seqs": 128})
    assert seen == []  # refused before vLLM is asked for anything
    with pytest.raises(EngineError, match="max_model_len, seed already"):
        vllm_engine_args(VLLMConfig(model="m"), "m", {"seed": 1, "max_model_len": 2048})


def test_the_config_refuses_an_empty_batch() -> None:
    with pytest.raises(ValidationError, match="max_num_seqs"):
        VLLMConfig(model="m", max_num_seqs=0)


def test_outside_ray_vllm_keeps_its_default_stat_loggers(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a Ray process vLLM logs through `RayPrometheusStatLogger` (scraped from Ray's
    endpoint in tests/vllm/test_vllm_engine.py); outside one, vLLM's defaults (None).  A
    process with no Ray connected, whatever cluster this test session has started."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert vllm_engine.ray_stat_loggers() is None
