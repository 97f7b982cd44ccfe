"""The live progress display of a synthesis run, fed by the search actors' counters.

A background thread polls the run's progress board (`actors.progress.ProgressBoard`)
twice a second.  On a terminal it redraws a rich panel in place (2 refreshes a second);
elsewhere (``ray job logs``, cron mail, a file) it prints one plain line every
`every_s` seconds and a last one at the end.  What it shows:

    trees done / in flight / total (under the night allocator each problem's probe; its
    second trees apart) | nodes expanded | policy tok/s | PRM tok/s
    | cache: each engine's prompt tokens read from its prefix cache so far
    | answered nodes (correct) | budget spent / budget total | elapsed | ETA

Token rates are over the last 10 s.  The ETA is budget-based: a tree search spends its
whole budget B, so the work left is the budget total (problems x B) minus what was spent,
at the rate spent so far.  Correct nodes are known when a tree has been graded.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from pipeline.report.engine_reads import share

Snapshot = dict[str, Any]
WINDOW_S = 10.0


@dataclass(frozen=True)
class View:
    """One frame of the display, computed from a snapshot of the counters."""

    total: int
    done: int
    in_flight: int
    errors: int
    nodes: int
    answered: int
    correct: int
    policy_tok_s: float
    prm_tok_s: float
    # the share of each engine's prompt tokens read from its prefix cache so far
    policy_hit: float | None
    prm_hit: float | None
    spent: float
    budget_total: float  # problems x B: the most the trees can spend
    elapsed_s: float
    eta_s: float | None
    # the night allocator's second trees (not in `done`, `in_flight`: those are each
    # problem's first tree, counted against the selection)
    second_done: int = 0
    second_in_flight: int = 0

    def trees(self) -> str:
        seconds = self.second_done + self.second_in_flight
        return (
            f"{self.done}/{self.total} done, {self.in_flight} in flight"
            + (f", {self.errors} failed" if self.errors else "")
            + (
                f"; second trees {self.second_done} done, {self.second_in_flight} in flight"
                if seconds
                else ""
            )
        )

    def line(self) -> str:
        eta = "-" if self.eta_s is None else _duration(self.eta_s)
        share = f" ({self.spent / self.budget_total:.0%})" if self.budget_total else ""
        budget = f"{self.spent:,.0f}/{self.budget_total:,.0f}{share}"
        return (
            f"trees {self.trees()} | "
            f"nodes {self.nodes} | policy {self.policy_tok_s:.1f} tok/s | "
            f"PRM {self.prm_tok_s:.1f} tok/s | {self.cache_hits()} | answered {self.answered} "
            f"(correct {self.correct}) | budget {budget} | "
            f"elapsed {_duration(self.elapsed_s)} | ETA {eta}"
        )

    def table(self) -> Table:
        table = Table(title="synthesis", show_header=False, title_justify="left", box=None)
        table.add_column("what", style="bold")
        table.add_column("value")
        table.add_row("trees", self.trees())
        table.add_row("nodes expanded", str(self.nodes))
        table.add_row("tokens/s", f"policy {self.policy_tok_s:.1f}, PRM {self.prm_tok_s:.1f}")
        table.add_row("prompt tokens read from cache", self.cache_hits().removeprefix("cache "))
        table.add_row("answered nodes", f"{self.answered} (correct {self.correct})")
        share = f" ({self.spent / self.budget_total:.0%})" if self.budget_total else ""
        table.add_row("budget spent", f"{self.spent:,.0f} of {self.budget_total:,.0f}{share}")
        eta = "-" if self.eta_s is None else _duration(self.eta_s)
        table.add_row("elapsed / ETA", f"{_duration(self.elapsed_s)} / {eta}")
        return table

    def cache_hits(self) -> str:
        """The engines' prefix-cache hit rates: prompt tokens served from cache / sent."""

        def rate(hit: float | None) -> str:
            return "-" if hit is None else f"{hit:.0%}"

        return f"cache policy {rate(self.policy_hit)} PRM {rate(self.prm_hit)}"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _share(snap: Snapshot, part: str, whole: str) -> float | None:
    """A hit rate from the board's counters; None rather than one outside [0, 1]."""
    return share(int(snap.get(part, 0)), int(snap.get(whole, 0)))


class ProgressLine:
    """Progress where no terminal is (``ray job logs``, cron mail, nohup): a plain line at
    most every `every_s` seconds, so logs stay readable.  A terminal gets a rich display
    instead (`LiveProgress`, `jobs.evaluate`)."""

    def __init__(self, file: TextIO | None = None, every_s: float = 10.0) -> None:
        self.file = file or sys.stderr
        self.every_s = every_s
        self._last = time.perf_counter()  # the first line after `every_s`

    def show(self, line: str, *, final: bool = False) -> bool:
        """Print `line` if `every_s` has passed (always when `final`); True when printed."""
        now = time.perf_counter()
        if not final and now - self._last < self.every_s:
            return False
        print(line, file=self.file, flush=True)
        self._last = now
        return True


class LiveProgress:
    """Polls `fetch` (a counters snapshot) on a thread and shows it; `stop()` ends it."""

    def __init__(
        self,
        fetch: Callable[[], Snapshot],
        *,
        total: int,
        budget: float,
        file: TextIO | None = None,
        every_s: float = 10.0,
        poll_s: float = 0.5,
    ) -> None:
        self.fetch = fetch
        self.total = total
        self.budget = budget
        self.budget_total = total * budget
        self.file = file or sys.stderr
        self.every_s = every_s
        self.poll_s = poll_s
        self.start = time.perf_counter()
        self.frames = 0  # views drawn or printed (tests read it)
        self._history: deque[tuple[float, int, int]] = deque()
        self._last: Snapshot = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-progress", daemon=True)
        self._terminal = self.file.isatty()

    def set_total(self, total: int) -> None:
        """The trees this invocation will search, once the stream has said how many of
        the selection were done already or bad rows."""
        self.total = max(0, total)
        self.budget_total = self.total * self.budget

    def view(self, snap: Snapshot, now: float | None = None) -> View:
        now = time.perf_counter() if now is None else now
        policy = int(snap.get("policy_output_tokens", 0))
        prm = int(snap.get("prm_input_tokens", 0)) + int(snap.get("prm_output_tokens", 0))
        history = self._history
        history.append((now, policy, prm))
        while len(history) > 2 and now - history[1][0] >= WINDOW_S:
            history.popleft()
        t0, policy0, prm0 = history[0]
        span = now - t0
        elapsed = now - self.start
        spent = float(snap.get("spent", 0.0))
        # each problem's first tree (its only one, or its probe) apart from second trees
        second_started, second_done = (
            int(snap.get("second_started", 0)),
            int(snap.get("second_done", 0)),
        )
        started = int(snap.get("trees_started", 0)) - second_started
        done = int(snap.get("trees_done", 0)) - second_done
        eta = None
        if done >= self.total and second_started <= second_done:
            eta = 0.0
        elif spent > 0:
            eta = elapsed * max(self.budget_total - spent, 0.0) / spent
        return View(
            total=self.total,
            done=done,
            in_flight=max(0, started - done),
            errors=int(snap.get("tree_errors", 0)),
            nodes=int(snap.get("nodes", 0)),
            answered=int(snap.get("answered", 0)),
            correct=int(snap.get("correct", 0)),
            policy_tok_s=(policy - policy0) / span if span > 0 else 0.0,
            prm_tok_s=(prm - prm0) / span if span > 0 else 0.0,
            policy_hit=_share(snap, "policy_prompt_cached_tokens", "policy_prompt_sent_tokens"),
            prm_hit=_share(snap, "prm_prompt_cached_tokens", "prm_input_tokens"),
            spent=spent,
            budget_total=self.budget_total,
            elapsed_s=elapsed,
            eta_s=eta,
            second_done=second_done,
            second_in_flight=max(0, second_started - second_done),
        )

    def _snapshot(self) -> Snapshot:
        with contextlib.suppress(Exception):  # a missed poll only delays the display
            self._last = self.fetch()
        return self._last

    def _run(self) -> None:
        if self._terminal:
            console = Console(file=self.file)
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while not self._stop.wait(self.poll_s):
                    live.update(self.view(self._snapshot()).table())
                    self.frames += 1
                live.update(self.view(self._snapshot()).table())
            return
        plain = ProgressLine(self.file, self.every_s)
        while not self._stop.wait(self.poll_s):
            self.frames += plain.show(self.view(self._snapshot()).line())
        plain.show(self.view(self._snapshot()).line(), final=True)

    def begin(self) -> None:
        self.start = time.perf_counter()
        self._thread.start()

    def __enter__(self) -> LiveProgress:
        self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
