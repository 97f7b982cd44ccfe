"""A one-pass PRM on CPU: a token-classification checkpoint run with transformers and torch.

The embedded default's trained scorer: SmolLM2-135M with a two-class head on every token,
as `bgmcts train-prm` saves it (`save_pretrained`: config.json, weights, tokenizer files).
A path is laid out by `actors.engines.step_layout` (the layout the trainer used) and one
forward pass gives every step's value: the probability of a good step at the separator
closing the step (`actors.engines.one_pass_engine`, which lays out, checks and reads for
every one-pass engine; this module only runs the model).

Concurrent `score_steps` calls are gathered into one padded forward: the first waiting
path opens a window of `batch_window_s`, and whatever arrived by then (at most `max_batch`
paths) is right-padded with an attention mask and run at once; a path that is not to
be scored (too long, no step) never waits for one.  Right padding
keeps every real token at the position it has alone (the causal mask never lets a token
see the padding after it), so a path's values in a batch equal its values alone up to
float rounding (tests/actors/engines/test_transformers_prm.py bounds the difference).
The forward runs in one worker thread, so the event loop keeps serving while torch
computes, and forwards never overlap (they share torch's `threads`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from actors.engines.base import EngineCapacity, EngineError, EngineLoad, StepValues
from actors.engines.one_pass_engine import OnePassEngine, TokenRows
from actors.engines.step_layout import StepLayout, layout, separator_id

if TYPE_CHECKING:
    from actors.config import TransformersPRMConfig


@dataclass
class _Request:
    path: StepLayout
    future: asyncio.Future[TokenRows | StepValues]
    arrived: float = field(default_factory=time.monotonic)


class TransformersPRMEngine(OnePassEngine):
    """A token-classification PRM served by transformers in this process (CPU).

    `cache_stats()` counts the prompt tokens computed; none are ever cached.  There is
    no prefix cache here: every path is computed from its first token, although in a tree
    most of a child's path is its parent's - 68% of its tokens on the real SmolLM2 trees
    of the test fixtures (`benchmarks/one_pass_engine.py`), so a prefix cache would cut
    this engine's work about threefold.  Measured on a heavily loaded 2-core box, one
    thread scores 50-130 path tokens/s, so an 88-token path (the fixtures' mean) takes
    about a second, the same order as llama.cpp decoding the step that made it.  That is
    acceptable for the embedded default, which exists to run the real code on a laptop,
    not for throughput; a large PRM belongs on vLLM's pooling runner with its prefix
    cache.
    """

    source: ClassVar[str] = "transformers_prm"

    def __init__(
        self,
        model: str,
        *,
        threads: int = 1,
        max_batch: int = 16,
        batch_window_s: float = 0.002,
        context_length: int | None = None,
        dtype: str = "float32",
        step_separator: str = "\n",
        name: str | None = None,
    ) -> None:
        try:
            import torch
            from transformers import AutoModelForTokenClassification, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("the transformers_prm engine needs: pip install '.[prm]'") from exc
        from actors.checkpoint import verify_prm

        folder = Path(model).expanduser()
        # checked whole here too, not only before the run started: a folder changed since
        # fails with its cause rather than loading a cut-short file or a random head
        verify_prm(folder)
        torch.set_num_threads(threads)
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self._model = AutoModelForTokenClassification.from_pretrained(
            str(folder), dtype=getattr(torch, dtype)
        ).eval()
        self.name = name or folder.name
        self.context_length = int(context_length or self._model.config.max_position_embeddings)
        self.max_batch = max_batch
        self.batch_window_s = batch_window_s
        self.threads = threads
        # The trainer's rule: a BOS first when the tokenizer has one (SmolLM2 does;
        # Qwen2.5's tokenizer has none).
        self.bos: int | None = self._tokenizer.bos_token_id
        self.step_separator = step_separator
        self.separator = separator_id(self._encode, step_separator)
        pad = self._tokenizer.pad_token_id
        # Any id serves as padding: right of every real token, masked, never read.
        self._pad = int(pad if pad is not None else self._tokenizer.eos_token_id or 0)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prm-forward")
        self._pending: deque[_Request] = deque()
        self._full = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._running = 0  # paths in the forward now
        self._closed = False
        self.forwards = 0  # padded forwards run
        self.sequences = 0  # paths they scored
        self.prompt_tokens_evaluated = 0  # real (unpadded) tokens of those paths
        self.padded_tokens = 0  # padding computed alongside them

    @classmethod
    def from_config(
        cls, config: TransformersPRMConfig, *, step_separator: str = "\n"
    ) -> TransformersPRMEngine:
        """From the `engine:` block of a service config (`kind: transformers_prm`); the
        separator is the scorer's `one_pass.step_separator` (not an engine field)."""
        return cls(
            config.model,
            **config.model_dump(exclude={"kind", "model"}),
            step_separator=step_separator,
        )

    # -- what admission and the replica's stats read ------------------------------------

    def capacity(self) -> EngineCapacity:
        """One padded forward of `max_batch` paths; no KV cache is kept between calls, so
        the tokens held at once are a batch's worth, and the hit rate is 0 once anything
        was scored (no prefix cache)."""
        return EngineCapacity(
            max_seqs=self.max_batch,
            kv_tokens=self.max_batch * self.context_length,
            context_length=self.context_length,
            prefix_hit_rate=0.0 if self.prompt_tokens_evaluated else None,
        )

    def load(self) -> EngineLoad:
        return EngineLoad(
            max_seqs=self.max_batch,
            running=self._running,
            waiting=len(self._pending),
            prompt_tokens=self.prompt_tokens_evaluated,
            cached_prompt_tokens=0,
        )

    def cache_stats(self) -> dict[str, int]:
        """Prompt tokens computed (every token of every path: see the class docstring)."""
        return {
            "prompt_tokens_evaluated": self.prompt_tokens_evaluated,
            "prompt_tokens_cached": 0,
            "tokens_generated": 0,
            "forwards": self.forwards,
            "sequences": self.sequences,
            "padded_tokens": self.padded_tokens,
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
        # no prefix cache here: every row is computed, `read_cache` or not
        """The path waits for a padded forward with the paths that arrive in its window."""
        loop = asyncio.get_running_loop()
        request = _Request(path, loop.create_future())
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
                results = await loop.run_in_executor(self._executor, self.forward, paths)
            except Exception as exc:  # a model failure answers every caller, never hangs one
                error = f"transformers_prm forward failed: {type(exc).__name__}: {exc}"
                results = [StepValues((), 0, error=error) for _ in batch]
            finally:
                self._running = 0
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    def forward(self, paths: Sequence[StepLayout]) -> list[TokenRows]:
        """One right-padded forward over `paths` (worker thread): each path's rows of class
        logits, its padding left out."""
        torch = self._torch
        longest = max(len(p.input_ids) for p in paths)
        ids = torch.full((len(paths), longest), self._pad, dtype=torch.long)
        mask = torch.zeros((len(paths), longest), dtype=torch.long)
        for row, path in enumerate(paths):
            ids[row, : len(path.input_ids)] = torch.tensor(path.input_ids, dtype=torch.long)
            mask[row, : len(path.input_ids)] = 1
        with torch.inference_mode():
            logits = self._model(input_ids=ids, attention_mask=mask).logits.float()
        real = sum(len(p.input_ids) for p in paths)
        self.forwards += 1
        self.sequences += len(paths)
        self.prompt_tokens_evaluated += real
        self.padded_tokens += len(paths) * longest - real
        return [TokenRows(logits[row, : len(p.input_ids)].tolist()) for row, p in enumerate(paths)]


__all__ = ["TransformersPRMEngine"]
