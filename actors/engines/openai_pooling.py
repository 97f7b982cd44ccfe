"""A one-pass PRM behind a vLLM server's `/pooling` endpoint (`--runner pooling`).

`python -m vllm.entrypoints.openai.api_server --runner pooling --pooler-config
'{"tok_pooling_type": "ALL"}' --model PRM ...` serves a process reward model (`vllm serve`
takes the same flags).  ALL pooling is needed: `Qwen2ForProcessRewardModel`'s default is
STEP pooling, which vLLM 0.32 answers with the rows of token 151651 only (Qwen's
`<extra_0>`, whatever the model's vocabulary).  `POST /pooling` with `{"model", "input":
[token ids], "task": "token_classify", "use_activation": false}` answers `data[0].data`,
one row of raw class logits per input token.  The engine sends the path as token ids built by
`actors.engines.step_layout.layout`, so the server scores exactly the training layout, and
reads each step's value at its separator itself (`actors.engines.one_pass_engine`, the
part every one-pass engine shares: this module only talks to the server); a
server whose pooler leaves tokens out (STEP) is told apart by its row count and answered
with an error naming the flag.

Tokenizing: through the server's own `POST /tokenize` (`add_special_tokens: false`),
not a local tokenizer.  Why: the ids must be the served model's, and the search nodes
then need neither the model's files nor `transformers` (not in the base install).  The
pieces of a tree's paths repeat (every child repeats its parent's prompt and steps), so
each text's ids are kept (a bounded LRU) and a new node costs one `/tokenize` of its new
step.  The BOS rule of `layout` ("the tokenizer's BOS, if it has one") is read as what
the server's tokenizer puts before a text with special tokens on: `/tokenize` of "" with
`add_special_tokens: true` (Qwen2.5: nothing; Llama 3: its BOS).  `render_chat` is
vLLM's chat renderer (`/tokenize` with `messages`, then `/detokenize`).

A server that is not a pooling server (no `/pooling`, or a model without token
classification) gives an error StepValues naming the flag to start it with; a path longer
than `context_length` is an error StepValues before any request: `score_steps` never
raises.  The API key is read from `api_key_env` when the engine is built, sent as a
Bearer token and kept out of errors and `repr`.

`httpx` is imported only where the engine runs (the config is read where the run starts,
and httpx takes longer to import than the whole config).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from actors.engines.base import EngineConfigBase, EngineError, StepValues, short_name
from actors.engines.one_pass_engine import OnePassEngine, TokenRows
from actors.engines.openai_compat import ApiKeyEnv, api_key, keyed_repr, server_root
from actors.engines.step_layout import StepLayout
from common.redact import redact_text


class OpenAIPoolingConfig(EngineConfigBase):
    """A one-pass PRM behind vLLM's OpenAI-compatible server (its `/pooling` endpoint), started
    with `--runner pooling --pooler-config '{"tok_pooling_type": "ALL"}'`; the key is read
    from `api_key_env`, never stored."""

    scores_steps: ClassVar[bool] = True

    kind: Literal["openai_pooling"] = Field(
        "openai_pooling", description="the /pooling endpoint of a vLLM server (--runner pooling)"
    )
    base_url: str = Field(
        description="the server's URL, e.g. http://localhost:8000 (a trailing /v1 is dropped: "
        "vLLM serves /pooling and /tokenize at its root)"
    )
    model: str = Field(description="the served model name sent with every request")
    api_key_env: ApiKeyEnv = "OPENAI_API_KEY"
    context_length: int = Field(
        8192, ge=256, description="tokens of one scored path (the server's --max-model-len)"
    )
    request_timeout_s: float = Field(
        120.0, gt=0, description="seconds one HTTP request may take before it fails"
    )

    def build(self, *, step_separator: str) -> OpenAIPoolingEngine:
        return OpenAIPoolingEngine(self, step_separator=step_separator)


TOKEN_CACHE = 4096  # texts whose ids are kept (prompts and steps of recent paths)
_NOT_POOLING = (
    "is not a pooling server (start vLLM with --runner pooling and a model with token "
    "classification, e.g. Qwen2ForProcessRewardModel)"
)


class OpenAIPoolingEngine(OnePassEngine):
    """A process reward model behind a vLLM server (see the module docstring), built from
    its config (`kind: openai_pooling`; `api_key_env: null` means no key) and the scorer's
    `one_pass.step_separator`."""

    source: ClassVar[str] = "/pooling"

    def __init__(self, config: OpenAIPoolingConfig, *, step_separator: str) -> None:
        import httpx

        # no variable named: the server takes no key; else one is required unless loopback
        required = False if config.api_key_env is None else None
        key = api_key(config.base_url, config.api_key_env, required, without="api_key_env: null")
        self.server_url = server_root(config.base_url.rstrip("/")).rstrip("/")
        self.model = config.model
        self.name = short_name(config.model)
        self.context_length = config.context_length
        self.step_separator = step_separator
        self.api_key_env = config.api_key_env
        self.has_key = key is not None  # the key itself is kept by the client only
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(
            base_url=self.server_url, headers=headers, timeout=config.request_timeout_s
        )
        self._ids_cache: OrderedDict[str, list[int]] = OrderedDict()
        self._special: list[int] | None = None  # [] or [bos], once asked

    def __repr__(self) -> str:
        return keyed_repr(self, server=self.server_url)

    __str__ = __repr__

    # -- the one-pass engine's parts ----------------------------------------------------

    async def _ids(self, texts: Sequence[str]) -> dict[str, list[int]]:
        """The ids of each text, from the cache or the server (all missing ones at once)."""
        cache = self._ids_cache
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        answers = await asyncio.gather(*(self._tokenize(t, special=False) for t in missing))
        for text, ids in zip(missing, answers, strict=True):
            cache[text] = ids
        found = {}
        for text in texts:
            cache.move_to_end(text)
            found[text] = cache[text]
        while len(cache) > TOKEN_CACHE:
            cache.popitem(last=False)
        return found

    async def _bos(self) -> int | None:
        if self._special is None:
            self._special = await self._special_prefix()
        return self._special[0] if self._special else None

    async def _rows(self, path: StepLayout, read_cache: bool = True) -> TokenRows | StepValues:
        # `read_cache` cannot be asked of the server: vLLM's /pooling endpoint keeps its
        # default for token classification (the cache written, not read): a row per token
        input_tokens = len(path.input_ids)
        body = {
            "model": self.model,
            "input": path.input_ids,
            "task": "token_classify",
            "use_activation": False,
        }
        status, data = await self._post("/pooling", body)
        if status in (404, 405, 501) or (status >= 400 and "support" in str(data).lower()):
            return StepValues(
                (),
                input_tokens,
                error=f"{redact_text(self.server_url)} {_NOT_POOLING}: "
                f"/pooling answered {status} {redact_text(str(data))[:200]}",
            )
        rows = _answer_rows(data) if status == 200 else None
        if rows is None:
            return StepValues(
                (), input_tokens, error=f"/pooling: {status} {redact_text(str(data))[:300]}"
            )
        return TokenRows(rows, _cached(data))

    # -- the server ---------------------------------------------------------------------

    async def _special_prefix(self) -> list[int]:
        ids = await self._tokenize("", special=True)
        if len(ids) > 1:
            raise EngineError(
                f"{self.name}: the tokenizer puts {len(ids)} special tokens ({ids}) before a "
                "text; the step layout takes one BOS at most"
            )
        return ids

    async def _tokenize(self, text: str, *, special: bool) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": special}
        status, data = await self._post("/tokenize", body)
        tokens = data.get("tokens") if status == 200 and isinstance(data, Mapping) else None
        if not isinstance(tokens, list):
            raise EngineError(
                f"{redact_text(self.server_url)}/tokenize: {status} "
                f"{redact_text(str(data))[:200]} (a vLLM server has it)"
            )
        return [int(t) for t in tokens]

    async def _post(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        import httpx

        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EngineError(
                f"{redact_text(self.server_url)}{path}: {type(exc).__name__} "
                f"{redact_text(str(exc))[:200]}"
            ) from exc
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text[:300]

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        body = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "add_generation_prompt": not continue_final,
            "continue_final_message": continue_final,
            "add_special_tokens": False,
        }
        status, data = await self._post("/tokenize", body)
        if status != 200 or not isinstance(data, Mapping) or "tokens" not in data:
            raise EngineError(
                f"{self.name}: could not render the chat on {redact_text(self.server_url)}: "
                f"/tokenize with messages: {status} {redact_text(str(data))[:200]}"
            )
        body = {"model": self.model, "tokens": list(data["tokens"])}
        status, text = await self._post("/detokenize", body)
        if status != 200 or not isinstance(text, Mapping) or "prompt" not in text:
            raise EngineError(f"{self.name}: /detokenize: {status} {str(text)[:200]}")
        return str(text["prompt"])

    async def tokenize(self, text: str) -> list[int]:
        return (await self._ids([text]))[text]

    async def close(self) -> None:
        await self._client.aclose()


def _answer_rows(data: Any) -> list[list[float]] | None:
    """`data[0].data` of a /pooling answer, when it is one list of numbers per token."""
    try:
        rows = data["data"][0]["data"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        return None
    return [[float(x) for x in row] for row in rows]


def _cached(data: Any) -> int:
    """The answer's cached prompt tokens, where the server reports them (else 0)."""
    try:
        cached = data["usage"]["prompt_tokens_details"]["cached_tokens"]
    except (KeyError, TypeError):
        return 0
    return cached if isinstance(cached, int) and cached > 0 else 0
