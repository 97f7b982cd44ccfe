"""`OpenAIEngine` against a real `vllm serve` (vllm-cpu here) with the tiny model.

Checks what the llama.cpp tests cannot: vLLM's `stop_reason` decides eos vs
stop string (no log-probability probe after the first answer), chat templates
render through vLLM's /tokenize + /detokenize, /tokenize in vLLM's body, and
a server started with --api-key.  Skipped unless `vllm` is importable.
"""

from __future__ import annotations

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

from actors.engines.base import Completion, Sampling
from actors.engines.openai_compat import OpenAIConfig, OpenAIEngine
from search.protocols import FinishReason
from tests.deadlines import SERVER_START_S
from tests.vllm.finishes import first_with_finish
from tests.vllm.server import TAKEN, server_on_a_free_port

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs vllm (scripts/test-vllm-cpu.sh)"
    ),
]

CONTEXT = 1024
KEY_ENV = "BGMCTS_TEST_VLLM_KEY"
FAKE_KEY = "sk-fake-vllm-serve-SECRET-42"
MESSAGES = [{"role": "user", "content": "What is 12 times 3?"}]
STOPS = ("q", "z", "\n")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.vllm.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama-serve"))


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    env["VLLM_API_KEY"] = FAKE_KEY  # the server demands it on /v1 routes
    with server_on_a_free_port(lambda port: _start_server(model_dir, log, env, port), log) as url:
        yield url


def _start_server(
    model_dir: Path, log: Path, env: dict[str, str], port: int
) -> subprocess.Popen[bytes] | None:
    """The server on `port`, answering /health; None when the port was taken."""
    # `vllm serve` fails under vllm-cpu (its CLI asks for the version of a distribution
    # named "vllm"); the module entry point is the same server.
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny",
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
        "16",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if process.poll() is not None:
            text = log.read_text()
            if TAKEN in text:
                return None
            raise RuntimeError(f"vllm serve exited:\n{text[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"vllm serve did not start:\n{log.read_text()[-3000:]}")
        time.sleep(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(server: str) -> AsyncIterator[OpenAIEngine]:
    os.environ[KEY_ENV] = FAKE_KEY
    engine = OpenAIEngine(
        OpenAIConfig(
            base_url=f"{server}/v1", model="tiny", api_key_env=KEY_ENV, context_length=CONTEXT
        ),
        max_retries=0,
    )
    yield engine
    await engine.close()
    os.environ.pop(KEY_ENV, None)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prompt(engine: OpenAIEngine) -> str:
    return await engine.render_chat(MESSAGES, continue_final=False)


async def test_chat_renders_through_vllm_tokenize(
    engine: OpenAIEngine, prompt: str, model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    local = AutoTokenizer.from_pretrained(model_dir)
    assert engine._renderer == "vllm"  # llama.cpp's /apply-template is absent: vLLM's used
    assert prompt == local.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    messages = [*MESSAGES, {"role": "assistant", "content": "Step 1: 12*3"}]
    prefill = await engine.render_chat(messages, continue_final=True)
    assert prefill.endswith("<|im_start|>assistant\nStep 1: 12*3")
    hf = OpenAIEngine(
        OpenAIConfig(
            base_url=f"{engine.base_url}",
            model="tiny",
            api_key_env=KEY_ENV,
            chat_template=str(model_dir),
        )
    )
    assert await hf.render_chat(messages, continue_final=True) == prefill
    assert await hf.tokenize("Step 2: 36") == await engine.tokenize("Step 2: 36")
    assert engine._tokenize_style == "vllm"
    await hf.close()


async def test_stop_reason_tells_stop_string_from_eos(engine: OpenAIEngine, prompt: str) -> None:
    async def make_stop(seed: int) -> Completion:
        return await engine.complete(
            prompt, Sampling(max_tokens=300, stop=STOPS, temperature=0.8, seed=seed)
        )

    stopped = await first_with_finish(make_stop, FinishReason.STOP_STRING)
    assert engine._reports_stop is True  # vLLM's stop_reason: no log-probability probe
    assert stopped.stop_string in STOPS and not any(s in stopped.text for s in STOPS)
    assert stopped.output_tokens == len(await engine.tokenize(stopped.text + stopped.stop_string))

    async def make_eos(seed: int) -> Completion:
        return await engine.complete(
            prompt, Sampling(max_tokens=300, stop=("\nStep",), temperature=0.8, seed=seed)
        )

    eos = await first_with_finish(make_eos, FinishReason.EOS)
    assert eos.output_tokens == len(await engine.tokenize(eos.text)) + 1
    assert eos.input_tokens == len(await engine.tokenize(prompt))

    async def make_length(seed: int) -> Completion:
        return await engine.complete(
            prompt, Sampling(max_tokens=6, stop=(), temperature=0.8, seed=seed)
        )

    length = await first_with_finish(make_length, FinishReason.LENGTH)
    assert length.output_tokens == 6


async def test_same_seed_same_text(engine: OpenAIEngine, prompt: str) -> None:
    kw: dict[str, Any] = {"max_tokens": 40, "stop": (), "temperature": 0.8}
    first = await engine.complete(prompt, Sampling(seed=5, **kw))
    again = await engine.complete(prompt, Sampling(seed=5, **kw))
    assert first.text == again.text and first.output_tokens == again.output_tokens


async def test_context_overflow(engine: OpenAIEngine) -> None:
    kw: dict[str, Any] = {"stop": (), "temperature": 0.8, "seed": 0}
    over = await engine.complete("x" * (CONTEXT + 5), Sampling(max_tokens=4, **kw))
    assert over.finish is FinishReason.CONTEXT_OVERFLOW, over.error
    assert over.input_tokens > CONTEXT

    async def make(seed: int) -> Completion:
        return await engine.complete(
            "y" * (CONTEXT - 3), Sampling(max_tokens=50, **{**kw, "seed": seed})
        )

    full = await first_with_finish(make, FinishReason.CONTEXT_OVERFLOW)
    assert full.output_tokens == 3


async def test_wrong_key_is_an_error_that_does_not_show_keys(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "sk-wrong-key-SECRET-7"
    monkeypatch.setenv("BGMCTS_TEST_WRONG_KEY", wrong)
    engine = OpenAIEngine(
        OpenAIConfig(base_url=f"{server}/v1", model="tiny", api_key_env="BGMCTS_TEST_WRONG_KEY"),
        max_retries=0,
    )
    failed = await engine.complete("hi", Sampling(max_tokens=3, stop=(), temperature=0.0, seed=0))
    assert failed.finish is FinishReason.ERROR and "401" in (failed.error or "")
    assert wrong not in (failed.error or "") and FAKE_KEY not in (failed.error or "")
    assert wrong not in repr(engine)
    await engine.close()
