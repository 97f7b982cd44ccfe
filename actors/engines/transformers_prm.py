"""A one-pass PRM on CPU: a token-classification checkpoint run with transformers and torch.

The embedded default's trained scorer: SmolLM2-135M with a two-class head on every token,
as `bgmcts train-prm` saves it (`save_pretrained`: config.json, weights, tokenizer files).
A path is laid out by `actors.engines.step_layout` (the layout the trainer used) and one
forward pass gives every step's value: the probability of a good step at the separator
closing the step (`actors.engines.one_pass_engine`, which lays out, checks and reads for
every one-pass engine; this module only runs the model).

Past keys and values are kept between calls.  In a search tree a child's path is its
parent's path plus one step, so most of a forward over the child would recompute what the
parent's forward computed: the keys and values of the parent's tokens.  The engine keeps
each scored path's keys and values (`PastCache`: least recently used dropped first, at
most `kv_cache_tokens` tokens in all) and starts a path's forward after the longest kept
prefix that ends at one of its separators, which is where a parent's path ends; only the
new step is computed.  The rows then cover the new tokens only, and the earlier steps'
values are those read when the parent was scored (`one_pass_engine.SuffixValues`); a value
no longer remembered there sends the path again without the cache, computed whole.

Concurrent `score_steps` calls are gathered: the first waiting path opens a window of
`batch_window_s`, and whatever arrived by then (at most `max_batch` paths, from any tree)
is run together; a path that is not to be scored (too long, no step) never waits for one.
Rows with pasts of different lengths share a forward: the kept keys and values are
left-padded to the longest past, the new tokens right-padded to the longest, with a 2-D
attention mask that is 0 on both paddings and explicit position ids (the past's length
plus the offset), so every real token attends to exactly its own path's earlier tokens at
their own positions.  Rotary embeddings turn the keys before they are kept, so where a
kept key sits in the padded tensor changes nothing; a path's values in a batch equal its
values alone and cold up to float rounding (tests/actors/engines/test_transformers_prm.py
bounds the difference).  Padding among the new tokens is computed through every layer,
and a batch mixes cold paths (~90 tokens) with children (~20 new ones), so a batch is
split into forwards of similar lengths wherever that saves more padding than a forward's
fixed cost (`padding_groups`).  The pasts' lengths cost only attention, cheap at these
lengths, and never split a batch.

The forwards run in one worker thread, so the event loop keeps serving while torch
computes, and forwards never overlap (they share torch's `threads`); the past cache is
read and written only in that thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from actors.engines.base import (
    EngineCapacity,
    EngineConfigBase,
    EngineError,
    EngineLoad,
    Package,
    StepValues,
    Threads,
)
from actors.engines.checkpoint import (
    CONFIG,
    CheckpointError,
    position_ceiling,
    positions,
    read_model_config,
    verify_prm,
)
from actors.engines.memory import check_fits
from actors.engines.one_pass_engine import OnePassEngine, TokenRows
from actors.engines.prefix_gate import common_prefix
from actors.engines.step_layout import StepLayout, layout, separator_id

if TYPE_CHECKING:
    import torch

# The past cache's default bound: at most 1.5 GB for SmolLM2-135M in float32 (46 KB a token),
# twice what the embedded default's 16 trees hold at once (docs/configuration.md).
DEFAULT_KV_CACHE_TOKENS = 32_768


def kv_bytes_per_token(config: Mapping[str, Any], dtype: str) -> int | None:
    """Bytes of keys and values a token keeps in the past cache, from a model config: per
    layer, a key and a value for each KV head, `head_dim` elements of `dtype` each; None
    where the config does not say."""

    def number(key: str) -> int | None:
        value = config.get(key)
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )

    layers, heads, hidden = (
        number("num_hidden_layers"),
        number("num_attention_heads"),
        number("hidden_size"),
    )
    kv_heads = number("num_key_value_heads") or heads
    head_dim = number("head_dim") or (hidden // heads if hidden and heads else None)
    if layers is None or kv_heads is None or not head_dim:
        return None
    element = 4 if dtype == "float32" else 2
    return 2 * layers * kv_heads * head_dim * element


class TransformersPRMConfig(EngineConfigBase):
    """A one-pass PRM on CPU: a token-classification checkpoint (what `bgmcts train-prm`
    writes) run with transformers; concurrent paths share padded forwards, and a path's
    forward starts after its parent's kept keys and values."""

    packages: ClassVar[tuple[Package, ...]] = (
        Package("torch", "'.[prm]'"),
        Package("transformers", "'.[prm]'"),
    )
    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = "actors.engines.vocabulary:model_folder"

    kind: Literal["transformers_prm"] = Field(
        "transformers_prm", description="a one-pass PRM checkpoint on CPU (transformers)"
    )
    model: str = Field(
        description="the checkpoint folder (config.json, weights and tokenizer files, as "
        "`bgmcts train-prm` saves them)"
    )
    threads: Threads = 1
    max_batch: int = Field(16, ge=1, description="most paths in one padded forward")
    batch_window_s: float = Field(
        0.002, ge=0, le=1, description="how long a path waits for others to share its forward"
    )
    context_length: int | None = Field(
        None,
        ge=16,
        description="tokens of one path (prompt and steps); a longer one comes back as a "
        "context overflow. null: the model's max_position_embeddings; refused beyond them",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="the weights' and activations' type (bfloat16: half the memory)"
    )
    kv_cache_tokens: int = Field(
        DEFAULT_KV_CACHE_TOKENS,
        ge=0,
        description="tokens of scored paths' keys and values kept, so that a child's forward "
        "computes only its new step (least recently used dropped first; 0: none kept). "
        "SmolLM2-135M keeps 46 KB a token in float32 (1.5 GB at this default, half in "
        "bfloat16); the default holds every path of the embedded default's 16 trees at once "
        "(about 13,000 tokens) with room to spare. Refused where the checkpoint's keys and "
        "values of this many tokens would take more than the machine's memory",
    )

    def check_model(self) -> str | None:
        """The checkpoint must be here (the CPU engine runs where the config is) and be a
        whole two-class token classifier (`actors.engines.checkpoint.verify_checkpoint`:
        weights, head, values, tokenizer, layout file); `context_length` within the
        positions it has, and `kv_cache_tokens` of its keys and values within this
        machine's memory."""
        folder = Path(self.model).expanduser()
        if not folder.is_dir():
            # the usual cause: no checkpoint trained yet; say how to make one (one line)
            raise EngineError(
                f"engine.model: {folder} is not a folder here; train one from a run's trees: "
                f"make prm RUNS=<run folder> PRM_OUT={folder} (bgmcts train-prm)",
                field="engine.model",
            )
        config = verify_prm(folder).config
        ceiling = position_ceiling(config)
        context = self.context_length
        if context is not None and ceiling is not None and context > ceiling:
            raise EngineError(
                f"engine.context_length: {context:,} tokens is beyond the "
                f"{ceiling:,} positions the checkpoint has ({folder / CONFIG}); lower it, or "
                "leave it null for the checkpoint's own",
                field="engine.context_length",
            )
        per_token = kv_bytes_per_token(config, self.dtype)
        if per_token is not None:
            check_fits(
                "engine.kv_cache_tokens",
                self.kv_cache_tokens * per_token,
                f"{self.kv_cache_tokens:,} tokens of kept keys and values ({per_token:,} bytes "
                f"a token for this checkpoint in {self.dtype})",
            )
        return None

    def context(self) -> tuple[str, int | None]:
        """`context_length`; when null, the checkpoint's own positions where the checkpoint
        is here (what the engine takes then), so that the run's check of the longest path
        against it is made before the run (None: not known until the engine loads)."""
        if self.context_length is not None:
            return "context_length", self.context_length
        try:
            config = read_model_config(Path(self.model).expanduser())
        except CheckpointError:
            return "context_length", None  # `check_model` says what is wrong with it
        return "context_length", positions(config)

    def build(self, *, step_separator: str) -> TransformersPRMEngine:
        return TransformersPRMEngine(self, step_separator=step_separator)


@dataclass
class _Request:
    path: StepLayout
    read_cache: bool
    future: asyncio.Future[TokenRows | StepValues]
    arrived: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class _Past:
    """The keys and values of one path's tokens, per layer, each [kv heads, tokens, head
    dim]: what the model would compute for those tokens again, already rotated to their
    positions (RoPE is applied before the cache)."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    tokens: int


# Below this many shared tokens a past is not worth a row of padded keys in the batch.
MIN_SHARED = 8


class PastCache:
    """Scored paths' keys and values, kept so that a child's forward starts after them.

    A least-recently-used map from a path's token ids to its `_Past`, holding at most
    `bound` tokens in all (0: nothing is kept).  The whole id tuple is the key, not its
    hash: two different paths never share an entry, whatever their hashes.  Each entry is
    a whole path, so a child stores its parent's tokens again: simpler than sharing
    storage between entries, and it costs only memory, which the bound caps.  Used from
    the engine's one forward thread only, so it takes no lock.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held = 0  # tokens in the entries now
        self._entries: OrderedDict[tuple[int, ...], _Past] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, path: StepLayout) -> _Past | None:
        """The kept keys and values of the longest prefix `path` shares with a kept path,
        leaving at least one token of `path` to compute; None when that is shorter than
        `MIN_SHARED` tokens.

        Any shared prefix serves, not only a whole kept path: a child's path is its
        parent's path plus a step, and a root's children share the problem's tokens with
        the first child scored, though none of them is another's prefix.  A cut entry is
        a view of its first tokens (the keys of a token depend only on those before it).
        """
        ids = tuple(path.input_ids)
        best, best_key = 0, None
        for key in self._entries:
            shared = common_prefix(key, ids)
            if shared >= best:  # later entries are more recent: they win ties
                best, best_key = shared, key
        best = min(best, len(ids) - 1)
        if best_key is None or best < MIN_SHARED:
            return None
        self._entries.move_to_end(best_key)
        past = self._entries[best_key]
        if best == past.tokens:
            return past
        return _Past([(k[:, :best], v[:, :best]) for k, v in past.layers], best)

    def store(self, ids: Sequence[int], past: _Past) -> None:
        """Keep `past` for the path `ids`, then drop the least recently used entries
        until the bound holds (their tensors are freed once no forward holds them)."""
        if past.tokens > self.bound:
            return  # it would evict everything and still not fit
        key = tuple(ids)
        old = self._entries.pop(key, None)
        if old is not None:
            self.held -= old.tokens
        self._entries[key] = past
        self.held += past.tokens
        while self.held > self.bound:
            _, evicted = self._entries.popitem(last=False)
            self.held -= evicted.tokens

    def clear(self) -> None:
        self._entries.clear()
        self.held = 0


def padding_groups(lengths: Sequence[int], forward_cost: float) -> list[list[int]]:
    """The rows of a batch (their `lengths` of tokens to compute) split into forwards so
    that padding plus forwards costs least.

    A padded forward computes rows x its longest row; a forward also has a fixed cost,
    `forward_cost` in tokens' worth.  With the rows sorted longest first, the best split
    is into runs of neighbours, so a short dynamic programme over the sorted rows finds it.
    Returns the groups as row indices, longest rows first.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = [0.0] + [float("inf")] * len(order)  # best[j]: the cost of the first j rows
    cut = [0] * (len(order) + 1)  # where the last group of those j rows starts
    for end in range(1, len(order) + 1):
        for start in range(end):  # a group of rows start..end-1, padded to row start's
            cost = best[start] + forward_cost + (end - start) * lengths[order[start]]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    groups: list[list[int]] = []
    end = len(order)
    while end:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


class TransformersPRMEngine(OnePassEngine):
    """A token-classification PRM served by transformers in this process (CPU).

    `cache_stats()` counts the path tokens computed (`prompt_tokens_evaluated`, padding
    left out) and those whose keys and values came from the past cache
    (`prompt_tokens_cached`); `load()` and `capacity().prefix_hit_rate` report the same.
    A child's path is mostly its parent's (68% of its tokens on the real SmolLM2 trees of
    the test fixtures), so keeping pasts more than halves the work: scoring those 157
    paths parents first computes 35 tokens a path instead of 88, and when it was 41 it took
    a third of the time (24-28 s against 71-110 s on one thread of a heavily loaded 2-core
    box; docs/benchmarks.md, "The one-pass PRM engine on CPU").

    The price is memory: SmolLM2-135M keeps 2 x 30 layers x 3 heads x 64 floats a token,
    46 KB in float32, so the default bound of 32,768 tokens is at most 1.5 GB.  It holds
    every path the embedded default scores at once (16 trees: about 13,000 tokens on the
    fixture trees) with room to spare.  A model whose forward takes no past, or with
    sliding-window layers (a kept past would not be what a cold pass sees), keeps none.

    Measured on a heavily loaded 2-core box, one thread computes 50-130 path tokens/s,
    the same order as llama.cpp decoding the step that made the path.  That suits the
    embedded default, which exists to run the real code on a laptop, not throughput; a
    large PRM belongs on vLLM's pooling runner with its prefix cache.
    """

    source: ClassVar[str] = "transformers_prm"

    def __init__(self, config: TransformersPRMConfig, *, step_separator: str) -> None:
        try:
            import torch
            from transformers import AutoModelForTokenClassification, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("the transformers_prm engine needs: pip install '.[prm]'") from exc

        threads, max_batch = config.threads, config.max_batch
        folder = Path(config.model).expanduser()
        # checked here too, not only before the run started: a folder changed since fails
        # with its cause rather than loading a cut-short file or a random head
        config.check_model()
        torch.set_num_threads(threads)
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self._model = AutoModelForTokenClassification.from_pretrained(
            str(folder), dtype=getattr(torch, config.dtype)
        ).eval()
        self.name = folder.name
        max_positions = self._model.config.max_position_embeddings
        self.context_length = int(config.context_length or max_positions)
        self.max_batch = max_batch
        self.batch_window_s = config.batch_window_s
        self.threads = threads
        # A forward's fixed cost in tokens' worth: SmolLM2-135M on one thread takes ~45 ms
        # for a forward of one token and ~3 ms a token in a large one, so a forward costs
        # about 16 tokens.  A batch is split where that saves more padding than it adds
        # forwards (`padding_groups`); a huge value keeps every batch in one forward.
        self.forward_cost_tokens: float = 16
        # The trainer's rule: a BOS first when the tokenizer has one (SmolLM2 does;
        # Qwen2.5's tokenizer has none).
        self.bos: int | None = self._tokenizer.bos_token_id
        self.step_separator = step_separator
        self.separator = separator_id(self._encode, step_separator)
        pad = self._tokenizer.pad_token_id
        # Any id serves as padding: right of every real token, masked, never read.
        self._pad = int(pad if pad is not None else self._tokenizer.eos_token_id or 0)
        # Touched only by the forward thread (`forward`), so it needs no lock.
        self._past = PastCache(config.kv_cache_tokens if self._keeps_past() else 0)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prm-forward")
        self._pending: deque[_Request] = deque()
        self._full = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._running = 0  # paths in the forward now
        self._closed = False
        self.forwards = 0  # padded forwards run
        self.sequences = 0  # paths they scored
        self.prompt_tokens_evaluated = 0  # real (unpadded) tokens computed
        self.prompt_tokens_cached = 0  # tokens whose keys and values came from `_past`
        self.padded_tokens = 0  # padding computed alongside them

    # -- what admission and the replica's stats read ------------------------------------

    @property
    def kv_cache_tokens(self) -> int:
        """The most tokens of past keys and values kept between calls (0: none)."""
        return self._past.bound

    def capacity(self) -> EngineCapacity:
        """One padded forward of `max_batch` paths.  The tokens kept warm between calls
        are the past cache's bound (without one, a batch's worth, held only during the
        forward); the hit rate is the share of path tokens read from it so far."""
        seen = self.prompt_tokens_evaluated + self.prompt_tokens_cached
        return EngineCapacity(
            max_seqs=self.max_batch,
            kv_tokens=self._past.bound or self.max_batch * self.context_length,
            context_length=self.context_length,
            prefix_hit_rate=self.prompt_tokens_cached / seen if seen else None,
        )

    def load(self) -> EngineLoad:
        # as llama.cpp reports them: every path token seen, and those of them read cached
        return EngineLoad(
            max_seqs=self.max_batch,
            running=self._running,
            waiting=len(self._pending),
            prompt_tokens=self.prompt_tokens_evaluated + self.prompt_tokens_cached,
            cached_prompt_tokens=self.prompt_tokens_cached,
        )

    def cache_stats(self) -> dict[str, int]:
        """Path tokens computed (padding left out: `padded_tokens`) and read from the past
        cache, and what the cache holds now."""
        return {
            "prompt_tokens_evaluated": self.prompt_tokens_evaluated,
            "prompt_tokens_cached": self.prompt_tokens_cached,
            "tokens_generated": 0,
            "forwards": self.forwards,
            "sequences": self.sequences,
            "padded_tokens": self.padded_tokens,
            "kv_cache_tokens_held": self._past.held,
            "kv_cache_paths": len(self._past),
        }

    # -- the engine contract ------------------------------------------------------------

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        if self._closed:
            return StepValues((), 0, error="the transformers_prm engine is closed")
        return await super().score_steps(prompt, steps)

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        if not self._tokenizer.chat_template:
            raise EngineError(
                f"the PRM checkpoint {self.name!r} has no chat template in its tokenizer: "
                "use one_pass.prompt_format: plain"
            )
        text = self._tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=not continue_final,
            continue_final_message=continue_final,
        )
        return str(text)

    async def tokenize(self, text: str) -> list[int]:
        return self._encode(text)

    async def close(self) -> None:
        self._closed = True
        while self._pending:
            request = self._pending.popleft()
            if not request.future.done():
                request.future.set_result(StepValues((), 0, error="engine closed"))
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._past.clear()  # no forward runs any more: the tensors can go

    # -- the one-pass engine's parts ----------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    async def _ids(self, texts: Sequence[str]) -> dict[str, list[int]]:
        return {text: self._encode(text) for text in texts}

    async def _bos(self) -> int | None:
        return self.bos

    def path_layout(self, prompt: str, steps: Sequence[str]) -> StepLayout:
        """`lay_out` without an event loop: the tokenizer is here (benchmarks use it)."""
        assert self.separator is not None  # found when the engine was built
        return layout(self._encode, prompt, steps, self.separator, self.bos)

    async def _rows(self, path: StepLayout, read_cache: bool = True) -> TokenRows | StepValues:
        """The path waits for a padded forward with the paths that arrive in its window;
        with `read_cache`, its rows start after the longest prefix the past cache holds."""
        loop = asyncio.get_running_loop()
        request = _Request(path, read_cache, loop.create_future())
        self._pending.append(request)
        if self._dispatcher is None or self._dispatcher.done():
            self._full = asyncio.Event()  # a fresh one for this event loop
            self._dispatcher = loop.create_task(self._dispatch())
        if len(self._pending) >= self.max_batch:
            self._full.set()
        return await request.future

    # -- batching -----------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Run padded forwards while paths wait: each waits for its window (or a full
        batch), then takes up to `max_batch` of the oldest paths."""
        loop = asyncio.get_running_loop()
        while self._pending:
            wait = self._pending[0].arrived + self.batch_window_s - time.monotonic()
            if wait > 0 and len(self._pending) < self.max_batch:
                self._full.clear()
                with contextlib.suppress(TimeoutError):  # the window closed first
                    await asyncio.wait_for(self._full.wait(), wait)
            batch = [
                self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))
            ]
            batch = [r for r in batch if not r.future.done()]  # a cancelled caller's
            if not batch:
                continue
            self._running = len(batch)
            results: Sequence[TokenRows | StepValues]
            try:
                paths = [r.path for r in batch]
                reads = [r.read_cache for r in batch]
                results = await loop.run_in_executor(self._executor, self.forward, paths, reads)
            except Exception as exc:  # a model failure answers every caller, never hangs one
                error = f"transformers_prm forward failed: {type(exc).__name__}: {exc}"
                results = [StepValues((), 0, error=error) for _ in batch]
            finally:
                self._running = 0
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    def forward(
        self, paths: Sequence[StepLayout], read_cache: Sequence[bool] | None = None
    ) -> list[TokenRows]:
        """Each path's rows of class logits (worker thread): for the tokens after the
        longest prefix the past cache holds (`read_cache`: per path, default all), or for
        every token.  Every path's keys and values are then kept for its children."""
        reads = [True] * len(paths) if read_cache is None else list(read_cache)
        pasts = [
            self._past.longest(path) if read and self._past.bound else None
            for path, read in zip(paths, reads, strict=True)
        ]
        new = [
            len(path.input_ids) - (0 if past is None else past.tokens)
            for path, past in zip(paths, pasts, strict=True)
        ]
        results: list[TokenRows | None] = [None] * len(paths)
        for group in padding_groups(new, self.forward_cost_tokens):
            rows = self._forward([paths[i] for i in group], [pasts[i] for i in group])
            for index, answer in zip(group, rows, strict=True):
                results[index] = answer
        return [answer for answer in results if answer is not None]

    def _forward(
        self, paths: Sequence[StepLayout], pasts: Sequence[_Past | None]
    ) -> list[TokenRows]:
        """One padded forward of `paths`, each after its `past` (None: from its first
        token).

        The layout, per row: the past keys and values left-padded to the longest past of
        the batch, then the new tokens right-padded to the longest; the 2-D attention mask
        is 0 on both paddings, and each new token's position id is its index in its own
        path (past length + offset).  So every real token attends to exactly its own
        path's earlier tokens at their own positions, as in a forward of the path alone:
        the causal mask is laid over the padded columns, and the cached keys carry their
        rotary rotation already, so where they sit in the padded tensor changes nothing.
        """
        torch = self._torch
        cached = [0 if past is None else past.tokens for past in pasts]
        new = [len(path.input_ids) - c for path, c in zip(paths, cached, strict=True)]
        width_past, width_new = max(cached), max(new)
        ids = torch.full((len(paths), width_new), self._pad, dtype=torch.long)
        mask = torch.zeros((len(paths), width_past + width_new), dtype=torch.long)
        positions = torch.zeros((len(paths), width_new), dtype=torch.long)
        for row, (path, c, n) in enumerate(zip(paths, cached, new, strict=True)):
            ids[row, :n] = torch.tensor(path.input_ids[c:], dtype=torch.long)
            mask[row, width_past - c : width_past + n] = 1
            # the padding after the path continues its positions (it is never attended to)
            positions[row] = torch.arange(c, c + width_new)
        keep = self._past.bound > 0
        with torch.inference_mode():
            cache = self._padded_past(pasts, width_past) if keep else None
            logits = self._model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=keep,
            ).logits.float()
        if cache is not None:
            for row, (path, c, n) in enumerate(zip(paths, cached, new, strict=True)):
                # cloned: a view would keep the whole batch's tensors alive
                start, end = width_past - c, width_past + n
                layers = [
                    (layer.keys[row, :, start:end].clone(), layer.values[row, :, start:end].clone())
                    for layer in cache.layers
                ]
                self._past.store(path.input_ids, _Past(layers, c + n))
        self.forwards += 1
        self.sequences += len(paths)
        self.prompt_tokens_evaluated += sum(new)
        self.prompt_tokens_cached += sum(cached)
        self.padded_tokens += len(paths) * width_new - sum(new)
        return [
            TokenRows(logits[row, :n].tolist(), c)
            for row, (c, n) in enumerate(zip(cached, new, strict=True))
        ]

    def _padded_past(self, pasts: Sequence[_Past | None], width: int) -> Any:
        """A `DynamicCache` of the batch's pasts, each left-padded (zeros, masked) to
        `width` tokens; an empty one, which the forward fills, when no row has a past."""
        from transformers import DynamicCache

        known = [past for past in pasts if past is not None]
        if not known:
            return DynamicCache()
        layers = []
        for index, (k, v) in enumerate(known[0].layers):
            keys = k.new_zeros((len(pasts), k.shape[0], width, k.shape[2]))
            values = v.new_zeros((len(pasts), v.shape[0], width, v.shape[2]))
            for row, past in enumerate(pasts):
                if past is not None:
                    keys[row, :, width - past.tokens :] = past.layers[index][0]
                    values[row, :, width - past.tokens :] = past.layers[index][1]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers)

    def _keeps_past(self) -> bool:
        """Whether this model can start a forward from kept keys and values: its forward
        takes `past_key_values`, and every layer attends to the whole path (a sliding
        window layer drops old keys, so a kept past would not be what a cold pass sees)."""
        if "past_key_values" not in inspect.signature(self._model.forward).parameters:
            return False
        config = self._model.config.get_text_config()
        types = getattr(config, "layer_types", None) or ()
        return all(kind == "full_attention" for kind in types)


__all__ = ["TransformersPRMEngine"]
