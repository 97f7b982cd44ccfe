"""Hold back a request whose prompt another request in flight is about to cache.

An engine with a prefix cache computes a prompt's shared prefix once only if the requests
that share it arrive one after another.  A search sends them together: the k children of
a node are k requests with the same prompt, and the scorer judges siblings at once, each
prompt its parent's conversation plus the sibling's own step.  Sent together, each of
them computes the shared part again: llama.cpp runs one prompt per slot, a slot's state
cannot be read while it is busy, and the parent's state, held by one slot, serves only
the first request that takes that slot.  In the embedded default about two thirds of the
GenPRM tokens llama.cpp computed beyond what a tree had already sent were of that kind.

`PrefixGate` keeps the prompts in flight and the texts of recent completions (prompt and
answer: what the engine's cache holds after a request).  A request waits while a prompt
in flight shares more with it than any recent completion does, by at least `margin`
characters, or is the same prompt; when that request ends, its text is a completion, the
new request's longest match, and the engine finds it in its cache.  Requests that share
only what every request shares (a few-shot scaffold, a system prompt) never wait: a
completion already holds that much.  A waiting request costs the search latency, not
throughput: the engine computes other trees' requests meanwhile.

A request that continues a completion (GenPRM's judgement, sent right after its analysis
with the analysis appended) goes before the requests that waited for that completion:
they are let go when the continuation starts, or `grace_s` after the completion when none
comes.  Let go at once, a sibling took the slot that held the analysis (it shares most of
it) a few milliseconds before the judgement asked for it, and the judgement computed the
analysis again.

Measured with the retired `prefix_reuse` benchmark (docs/benchmarks.md, "Every token computed
once").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

Text = TypeVar("Text", str, tuple[int, ...])


def common_prefix(a: Text, b: Text) -> int:
    """The length of the longest common prefix of `a` and `b`, two strings or two tuples of
    token ids (a binary search over slice comparisons, which run in C: prompts are
    thousands of characters)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class _Turn:
    """A request's place in the gate: `completed` once its answer is known."""

    def __init__(self, gate: PrefixGate, prompt: str) -> None:
        self.gate = gate
        self.prompt = prompt
        self.text: str | None = None

    def completed(self, answer: str) -> None:
        """The prompt and `answer` are now in the engine's cache."""
        self.text = self.prompt + answer
        self.gate.remember(self.text)


class PrefixGate:
    """Orders requests that share a prefix not cached yet (see the module docstring).

    `margin`: how many more characters a prompt in flight must share than the best recent
    completion before a request waits for it (a few tokens: less is not worth a wait).
    `remembered`: how many recent completions are compared (the engine's cache holds at
    least that many states; an older text is assumed gone).  `grace_s`: how long a
    completion is kept for its continuation before the requests that waited for it go.
    """

    def __init__(self, margin: int = 32, remembered: int = 256, grace_s: float = 0.1) -> None:
        self.margin = margin
        self.grace_s = grace_s
        self._done: deque[str] = deque(maxlen=remembered)
        # the prompt and event of each request in flight, and of each completion kept for
        # its continuation; the event is set when the entry goes
        self._entries: dict[int, tuple[str, asyncio.Event]] = {}
        self._kept: dict[int, str] = {}  # a kept entry -> its completion's text
        self._next = 0
        self.waits = 0  # requests that waited for another (a count for the stats)

    def _leader(self, prompt: str) -> asyncio.Event | None:
        """The event of an entry this request should wait for, if any."""
        if not self._entries:
            return None
        cached = max((common_prefix(prompt, text) for text in self._done), default=0)
        for other, ended in self._entries.values():
            shared = common_prefix(prompt, other)
            if shared == len(prompt) == len(other) or shared >= cached + self.margin:
                return ended
        return None

    @asynccontextmanager
    async def turn(self, prompt: str) -> AsyncIterator[_Turn]:
        """Wait for the entries this prompt should follow, then run as one in flight; a
        completion (`_Turn.completed`) is kept for its continuation for `grace_s`."""
        for key, text in list(self._kept.items()):
            if prompt.startswith(text):  # this continues a kept completion: it goes first
                self._release(key)
        waited = False
        while (leader := self._leader(prompt)) is not None:
            waited = True
            await leader.wait()
        self.waits += waited
        key, self._next = self._next, self._next + 1
        self._entries[key] = (prompt, asyncio.Event())
        turn = _Turn(self, prompt)
        try:
            yield turn
        finally:
            if turn.text is not None and self.grace_s > 0:
                self._kept[key] = turn.text
                asyncio.get_running_loop().call_later(self.grace_s, self._release, key)
            else:
                self._release(key)

    def remember(self, text: str) -> None:
        """`text` (a prompt and its answer) is in the engine's cache."""
        self._done.append(text)

    def _release(self, key: int) -> None:
        """The entry goes: the requests waiting for it check again."""
        self._kept.pop(key, None)
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry[1].set()


__all__ = ["PrefixGate", "common_prefix"]
