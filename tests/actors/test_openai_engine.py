"""`OpenAIEngine` against a real OpenAI-compatible server: llama.cpp's, in-process.

`LlamaCppEngine` starts llama.cpp's HTTP server (with the embedded SmolLM2
model) on 127.0.0.1; it serves /v1/completions, /tokenize and /apply-template,
and its native /completion endpoint reports `stop_type`, which is the ground
truth the OpenAI engine's eos/stop-string rule is checked against.  A small
stdlib HTTP server (`tests.openai_server`) stands in for servers that answer in
vLLM's or SGLang's format and for one that echoes the Authorization header back
in its errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from actors.engines.base import Sampling, engine_load
from actors.engines.llamacpp import LlamaCppConfig, LlamaCppEngine
from actors.engines.openai_compat import OpenAIConfig, OpenAIEngine
from actors.errors import EngineError
from actors.policy import EnginePolicy
from search import parse_search_config, run_search
from search.protocols import FinishReason
from search.scripted import ScriptedScorer
from tests.openai_server import FakeServer, Respond
from tests.openai_server import completion as _completion

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

FAKE_KEY = "sk-fake-0123456789-SECRET"
KEY_ENV = "BGMCTS_TEST_OPENAI_KEY"
CONTEXT = 1024
QUESTION = [{"role": "user", "content": "What is 12*3? Answer briefly."}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def native() -> AsyncIterator[LlamaCppEngine]:
    engine = LlamaCppEngine(LlamaCppConfig(context_length=CONTEXT, threads=1, parallel=2))
    yield engine
    await engine.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(native: LlamaCppEngine) -> AsyncIterator[OpenAIEngine]:
    assert native._server is not None
    engine = OpenAIEngine(
        OpenAIConfig(
            base_url=f"{native._server.listening_address}/v1",
            model="smollm2",
            context_length=CONTEXT,
        )
    )
    yield engine
    await engine.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def question(engine: OpenAIEngine) -> str:
    return await engine.render_chat(QUESTION, continue_final=False)


# ------------------------------------------------------------------ finish reasons
async def test_eos_stop_string_and_length_are_told_apart(
    engine: OpenAIEngine, question: str
) -> None:
    greedy = {"temperature": 0.0, "seed": 1}
    # the greedy answer is "12*3 = 36\n\nThis is a simple multiplication of 12 and 3."
    eos = await engine.complete(question, Sampling(max_tokens=64, stop=("zzz",), **greedy))
    assert eos.finish is FinishReason.EOS
    assert "36" in eos.text and eos.stop_string == ""

    word = await engine.complete(question, Sampling(max_tokens=64, stop=("36",), **greedy))
    assert word.finish is FinishReason.STOP_STRING
    assert word.stop_string == "36"
    assert "36" not in word.text and eos.text.startswith(word.text)

    # a one-token stop string: token counts alone could not tell it from an EOS
    newline = await engine.complete(question, Sampling(max_tokens=64, stop=("\n",), **greedy))
    assert newline.finish is FinishReason.STOP_STRING
    assert newline.text == eos.text.split("\n")[0]

    length = await engine.complete(question, Sampling(max_tokens=3, stop=("\n",), **greedy))
    assert length.finish is FinishReason.LENGTH
    assert length.output_tokens == 3

    unstopped = await engine.complete(question, Sampling(max_tokens=64, stop=(), **greedy))
    assert unstopped.finish is FinishReason.EOS
    assert unstopped.text == eos.text


async def test_finish_agrees_with_llamacpp_native_stop_type(
    engine: OpenAIEngine, native: LlamaCppEngine, question: str
) -> None:
    """On sampled steps the rule matches llama.cpp's own `stop_type`.

    Both endpoints sample alike, but a prompt evaluated in one batch and one
    served from the prefix cache give slightly different logits: a first
    request puts each prompt in the cache so that every later one reuses it.
    """
    policy = EnginePolicy(engine)
    step = await policy.render("What is 7 times 6? Put the answer in \\boxed{}.", "Step 1:")
    seen = set()
    for prompt in (step, question):  # mostly "\nStep" stops, then mostly natural ends
        await native.complete(prompt, Sampling(max_tokens=1, stop=(), temperature=0.0, seed=0))
        for seed in range(4):
            kw: dict[str, Any] = {"max_tokens": 64, "stop": ("\nStep",), "temperature": 0.8}
            ours = await engine.complete(prompt, Sampling(seed=seed, **kw))
            truth = await native.complete(prompt, Sampling(seed=seed, **kw))
            assert ours.text == truth.text
            assert ours.finish is truth.finish, (seed, ours, truth)
            assert ours.output_tokens == truth.output_tokens
            seen.add(ours.finish)
    assert {FinishReason.STOP_STRING, FinishReason.EOS} <= seen


# ------------------------------------------------------------------ seeds and token counts
async def test_same_seed_gives_the_same_text(engine: OpenAIEngine, question: str) -> None:
    kw: dict[str, Any] = {"max_tokens": 40, "stop": ("\nStep",), "temperature": 0.8}
    cache_it = Sampling(max_tokens=1, stop=(), temperature=0.0, seed=0)
    await engine.complete(question, cache_it)  # put the prompt in the prefix cache
    first = await engine.complete(question, Sampling(seed=11, **kw))
    again = await engine.complete(question, Sampling(seed=11, **kw))
    assert first.text == again.text and first.output_tokens == again.output_tokens
    others = [(await engine.complete(question, Sampling(seed=s, **kw))).text for s in (12, 13, 14)]
    assert any(text != first.text for text in others)


async def test_token_counts_match_tokenize(
    engine: OpenAIEngine, native: LlamaCppEngine, question: str
) -> None:
    greedy: dict[str, Any] = {"temperature": 0.0, "seed": 1, "max_tokens": 64}
    assert await engine.tokenize("12*3 = 36") == await native.tokenize("12*3 = 36")

    eos = await engine.complete(question, Sampling(stop=("zzz",), **greedy))
    # llama.cpp counts the EOS token it generated
    assert eos.output_tokens == len(await engine.tokenize(eos.text)) + 1

    word = await engine.complete(question, Sampling(stop=("36",), **greedy))
    # ... and the stop string's tokens, which the text excludes
    assert word.output_tokens == len(await engine.tokenize(word.text + "36"))
    assert word.output_tokens > len(await engine.tokenize(word.text))

    length = await engine.complete(question, Sampling(stop=(), **{**greedy, "max_tokens": 5}))
    assert length.output_tokens == 5 == len(await engine.tokenize(length.text))

    assert eos.input_tokens == word.input_tokens == len(await native.tokenize(question))


async def test_top_logprobs_only_when_asked(engine: OpenAIEngine, question: str) -> None:
    kw: dict[str, Any] = {"max_tokens": 4, "stop": ("\n",), "temperature": 0.0, "seed": 1}
    plain = await engine.complete(question, Sampling(**kw))
    assert plain.top_logprobs == ()  # the engine's own probe is not handed out
    asked = await engine.complete(question, Sampling(top_logprobs=3, **kw))
    assert len(asked.top_logprobs) == 4
    assert all(len(row) == 3 for row in asked.top_logprobs)
    assert all(row[0][1] >= row[1][1] >= row[2][1] for row in asked.top_logprobs)


# ------------------------------------------------------------------ context
async def test_prompt_longer_than_the_context_overflows(engine: OpenAIEngine) -> None:
    kw: dict[str, Any] = {"stop": (), "temperature": 0.8, "seed": 0}
    over = await engine.complete("hello " * (CONTEXT + 100), Sampling(max_tokens=8, **kw))
    assert over.finish is FinishReason.CONTEXT_OVERFLOW
    assert over.input_tokens > CONTEXT and over.output_tokens == 0

    # the prompt fits but the context fills up before max_tokens
    nearly = await engine.complete("hello " * (CONTEXT - 20), Sampling(max_tokens=200, **kw))
    assert nearly.finish in (FinishReason.CONTEXT_OVERFLOW, FinishReason.EOS)
    if nearly.finish is FinishReason.CONTEXT_OVERFLOW:
        assert nearly.output_tokens < 200


# ------------------------------------------------------------------ chat and tokenize
async def test_render_chat_on_the_server(engine: OpenAIEngine, native: LlamaCppEngine) -> None:
    messages = [*QUESTION, {"role": "assistant", "content": "Step 1:"}]
    for continue_final in (False, True):
        rendered = await engine.render_chat(messages[:1], continue_final=continue_final)
        assert rendered == await native.render_chat(messages[:1], continue_final=continue_final)
    open_turn = await engine.render_chat(messages, continue_final=True)
    assert open_turn.endswith("Step 1:")


async def test_render_chat_without_a_renderer_says_what_to_configure(
    native: LlamaCppEngine,
) -> None:
    assert native._server is not None
    url = f"{native._server.listening_address}/v1"
    none = OpenAIEngine(OpenAIConfig(base_url=url, model="smollm2"), chat_template="none")
    with pytest.raises(EngineError, match="chat_template"):
        await none.render_chat(QUESTION, continue_final=False)
    vllm_style = OpenAIEngine(
        OpenAIConfig(base_url=url, model="smollm2"), chat_template="vllm"
    )  # llama.cpp is not vLLM
    with pytest.raises(EngineError, match="tokenizer_path"):
        await vllm_style.render_chat(QUESTION, continue_final=False)
    with pytest.raises(EngineError, match="tokenizer_path"):
        OpenAIEngine(OpenAIConfig(base_url=url, model="smollm2"), chat_template="hf")
    await none.close()
    await vllm_style.close()


# ------------------------------------------------------------------ the search
async def test_search_with_the_openai_engine_keeps_the_budget(engine: OpenAIEngine) -> None:
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 48})
    budget = 240
    result = await run_search(
        "What is 12 times 3?", config, EnginePolicy(engine), ScriptedScorer(seed=0), budget, 3
    )
    assert 0 < result.c_used <= budget
    assert len(result.tree) > 2
    assert result.tokens.failed_generations == 0


# ------------------------------------------------------------------ servers in other formats
@pytest.fixture()
def fake_server() -> Iterator[Callable[[Respond], FakeServer]]:
    servers: list[FakeServer] = []

    def start(respond: Respond) -> FakeServer:
        servers.append(FakeServer(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("extra", "finish", "stop_string"),
    [
        ({"stop_reason": "\nStep"}, FinishReason.STOP_STRING, "\nStep"),  # vLLM, stop string
        ({"stop_reason": None}, FinishReason.EOS, ""),  # vLLM, EOS token
        ({"stop_reason": 128009}, FinishReason.EOS, ""),  # vLLM, a stop token id
        ({"matched_stop": "\nStep"}, FinishReason.STOP_STRING, "\nStep"),  # SGLang
        ({"matched_stop": 2}, FinishReason.EOS, ""),  # SGLang, EOS token id
    ],
)
async def test_servers_that_report_the_matched_stop(
    fake_server: Callable[[Respond], FakeServer],
    extra: dict[str, Any],
    finish: FinishReason,
    stop_string: str,
) -> None:
    requests: list[Mapping[str, Any]] = []

    def respond(path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        requests.append(body)
        return 200, _completion({"text": " six", "finish_reason": "stop", **extra}, 4)

    server = fake_server(respond)
    engine = OpenAIEngine(OpenAIConfig(base_url=f"{server.url}/v1", model="m"), max_retries=0)
    for _ in range(2):
        done = await engine.complete(
            "p", Sampling(max_tokens=9, stop=("\nStep",), temperature=1, seed=3)
        )
        assert (done.finish, done.stop_string) == (finish, stop_string)
        assert (done.output_tokens, done.input_tokens, done.text) == (4, 7, " six")
    # the first answer showed the server reports stops: no log-probability probe after it
    assert requests[0].get("logprobs") == 1 and requests[1].get("logprobs") is None
    assert requests[0]["seed"] == 3 and requests[0]["stop"] == ["\nStep"]
    await engine.close()


async def test_legacy_logprobs_listing_every_token(
    fake_server: Callable[[Respond], FakeServer],
) -> None:
    """A server that reports no stop but lists all generated tokens (OpenAI's format)."""

    def respond(path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        hit = body["prompt"] == "hit"
        tokens = [" six", "\n", "Step"] if hit else [" six", "<|eot_id|>"]
        logprobs = {
            "tokens": tokens,
            "token_logprobs": [-0.1] * len(tokens),
            "top_logprobs": [{t: -0.1} for t in tokens],
            "text_offset": list(range(len(tokens))),
        }
        choice = {"text": " six", "finish_reason": "stop", "logprobs": logprobs}
        return 200, _completion(choice, len(tokens))

    server = fake_server(respond)
    engine = OpenAIEngine(OpenAIConfig(base_url=f"{server.url}/v1", model="m"), max_retries=0)
    kw: dict[str, Any] = {"max_tokens": 9, "stop": ("\nStep",), "temperature": 1.0, "seed": 0}
    hit = await engine.complete("hit", Sampling(**kw))
    assert (hit.finish, hit.stop_string, hit.output_tokens) == (
        FinishReason.STOP_STRING,
        "\nStep",
        3,
    )
    eos = await engine.complete("eos", Sampling(**kw))
    assert (eos.finish, eos.output_tokens) == (FinishReason.EOS, 2)
    await engine.close()


# ------------------------------------------------------------------ the API key
async def test_api_key_is_never_shown(
    monkeypatch: pytest.MonkeyPatch,
    fake_server: Callable[[Respond], FakeServer],
    native: LlamaCppEngine,
) -> None:
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    seen: list[str] = []

    def echo(path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        # a careless server that echoes the credentials it got into its error
        auth = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        seen.append(auth)
        return 401, {"error": {"message": f"invalid key in header {auth!r}", "code": 401}}

    server = fake_server(echo)
    engine = OpenAIEngine(
        OpenAIConfig(base_url=f"{server.url}/v1", model="m", api_key_env=KEY_ENV), max_retries=0
    )
    assert FAKE_KEY not in repr(engine) and FAKE_KEY not in str(engine)
    assert KEY_ENV in repr(engine)

    failed = await engine.complete("p", Sampling(max_tokens=4, stop=(), temperature=0.0, seed=0))
    assert seen == [f"Bearer {FAKE_KEY}"]  # the key was sent...
    assert failed.finish is FinishReason.ERROR and failed.error
    assert "401" in failed.error and FAKE_KEY not in failed.error  # ...and never shown
    with pytest.raises(EngineError) as tokenize_error:
        await engine.tokenize("x")
    assert FAKE_KEY not in str(tokenize_error.value)
    with pytest.raises(EngineError) as render_error:
        await engine.render_chat(QUESTION, continue_final=False)
    assert FAKE_KEY not in str(render_error.value)
    await engine.close()

    # a dead server and a real context overflow: still no key in the messages
    dead = OpenAIEngine(
        OpenAIConfig(base_url=f"{server.url}/v1", model="m", api_key_env=KEY_ENV), max_retries=0
    )
    server.close()
    gone = await dead.complete("p", Sampling(max_tokens=4, stop=(), temperature=0.0, seed=0))
    assert gone.finish is FinishReason.ERROR and FAKE_KEY not in (gone.error or "")
    await dead.close()
    assert native._server is not None
    real = OpenAIEngine(
        OpenAIConfig(
            base_url=f"{native._server.listening_address}/v1", model="m", api_key_env=KEY_ENV
        ),
        max_retries=0,
    )
    over = await real.complete(
        "hi " * 2 * CONTEXT, Sampling(max_tokens=4, stop=(), temperature=0, seed=0)
    )
    assert over.finish is FinishReason.CONTEXT_OVERFLOW and FAKE_KEY not in (over.error or "")
    await real.close()


async def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)  # an ambient key must not be used instead
    with pytest.raises(EngineError, match=KEY_ENV):
        OpenAIEngine(
            OpenAIConfig(base_url="https://api.example.invalid/v1", model="m", api_key_env=KEY_ENV)
        )
    # local servers need no key, and the ambient OPENAI_API_KEY is not sent to them
    local = OpenAIEngine(
        OpenAIConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=KEY_ENV)
    )
    assert local._client.api_key != FAKE_KEY
    remote = OpenAIEngine(
        OpenAIConfig(base_url="http://policy:8000/v1", model="m", api_key_env=KEY_ENV),
        api_key_required=False,
    )
    assert remote._client.api_key != FAKE_KEY
    await local.close()
    await remote.close()


async def test_from_config() -> None:
    config = OpenAIConfig(
        base_url="http://vllm-policy:8000/v1", model="Qwen/Qwen2.5-7B-Instruct", api_key_env=None
    )
    engine = OpenAIEngine(config)
    assert (engine.base_url, engine.server_url) == (
        "http://vllm-policy:8000/v1",
        "http://vllm-policy:8000",
    )
    assert engine.chat_template == "auto" and engine.tokenizer_path is None
    assert engine.context_length == config.context_length and engine.name == "Qwen2.5-7B-Instruct"
    local = OpenAIEngine(config.model_copy(update={"chat_template": "/models/qwen"}))
    assert (local.chat_template, local.tokenizer_path) == ("hf", "/models/qwen")
    await engine.close()
    await local.close()


# ------------------------------------------------------------------ admission's load()
async def test_llamacpp_reports_its_slots_and_prompt_counters_but_not_its_queue(
    native: LlamaCppEngine,
) -> None:
    """What admission steers a llama.cpp run by: the counters grow with each request and
    the repeat of a prompt is served from the slot's prefix cache; the busy slots are
    unknown (None), so the controller keeps its target on them."""
    prompt = await native.render_chat(QUESTION, continue_final=False)
    before = engine_load(native)
    assert (before.max_seqs, before.running, before.waiting) == (2, None, None)
    greedy = Sampling(max_tokens=1, stop=(), temperature=0.0, seed=0)
    for _ in range(2):
        await native.complete(prompt, greedy)
    after = engine_load(native)
    assert before.prompt_tokens is not None and after.prompt_tokens is not None
    assert before.cached_prompt_tokens is not None and after.cached_prompt_tokens is not None
    assert after.prompt_tokens - before.prompt_tokens >= 2 * len(await native.tokenize(prompt)) - 2
    assert after.cached_prompt_tokens > before.cached_prompt_tokens
