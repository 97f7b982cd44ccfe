"""Live metrics of a synthesis run on Ray's own Prometheus endpoint.

Every Ray node runs a metrics agent that serves Prometheus text on the node's metrics
export port (`ray start --metrics-export-port`, `ray.init(_metrics_export_port=...)`), beside
Ray's, Serve's and vLLM's metrics.  What a process records with `ray.util.metrics` goes
there too: the agent prefixes the name with ``ray_`` and a counter's with ``_total`` at the
end, so `bgmcts_trees_committed` is scraped as ``ray_bgmcts_trees_committed_total``.  A
process sends what it recorded to its agent every `metrics_report_interval_ms` (10 s by
default), so a scrape lags by up to that; the last increments of a job whose driver exits
within that time may never reach the agent (run.json keeps the final figures).  The agent
forgets a gauge that was not set again within two report intervals, so the driver sets its
gauges again at every poll of the board (and a night's every `REFRESH_S`).

Every metric is recorded in the driver, from numbers it already counts, so the search
pays nothing for them (no call per request; a few per committed tree and per poll):

* committed: each searched problem's records as the driver commits them
  (`RunMetrics.committed`, next to `RunSummary.account`): trees, nodes, answered, correct
  and ungraded nodes, grading time-outs, budget spent, rows per table, rows each quality
  gate dropped, error rows.  When the run ends they equal this invocation's share of
  run.json and report.json (a resumed run's files also count earlier invocations).
* board: the progress board's counters (`actors.progress`), which the search actors push
  every half second while their trees run, polled by `BoardPoller`: trees started and in
  flight, tokens per engine (prompt tokens sent and read from the prefix cache, output
  tokens), requests retried and replayed, answers whose token counts were clamped.
  These count work as the engines answer it, trees still in flight included; at the end
  of a run where no tree failed or was redone they equal run.json's `engine_reads` and
  report.json's token totals (a failed or redone tree's tokens were spent, but it has no
  tree row).
* nightly: the slice a night searches and its spend (`record_night`).

`METRICS` lists them all (docs/metrics.md is their table; the Grafana dashboard in jobs/
reads only these and Ray's own).  The tags: `run` (the run id), `engine` (policy or
scorer) and `engine_kind` (its engine's kind), `table` (a record type), `gate` (a quality
gate's rule), `stage` (an error row's stage), `date` (a night's date).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

log = logging.getLogger(__name__)

PREFIX = "bgmcts_"
Kind = Literal["counter", "gauge"]
Feed = Literal["selection", "committed", "board", "nightly"]

RUN: tuple[str, ...] = ("run",)
ENGINE: tuple[str, ...] = ("run", "engine", "engine_kind")


@dataclass(frozen=True)
class Metric:
    name: str  # as recorded: without Ray's `ray_` prefix and a counter's `_total`
    kind: Kind
    tags: tuple[str, ...]
    help: str
    feed: Feed

    @property
    def exported(self) -> str:
        """The name a Prometheus scrape of Ray's endpoint shows."""
        return f"ray_{self.name}" + ("_total" if self.kind == "counter" else "")


def _m(name: str, kind: Kind, tags: tuple[str, ...], feed: Feed, help: str) -> Metric:
    return Metric(PREFIX + name, kind, tags, help, feed)


METRICS: tuple[Metric, ...] = (
    _m(
        "trees_selected",
        "gauge",
        RUN,
        "selection",
        "problems this invocation searches: the selection less problems committed by an "
        "earlier invocation and bad source rows",
    ),
    _m(
        "budget_cost_units",
        "gauge",
        RUN,
        "selection",
        "cost units the selected trees may spend at most: trees_selected x the budget B",
    ),
    _m("trees_started", "counter", RUN, "board", "trees the search actors started"),
    _m("trees_in_flight", "gauge", RUN, "board", "trees started and not yet returned"),
    _m(
        "trees_committed",
        "counter",
        RUN,
        "committed",
        "searched trees committed to the run folder (run.json `searched`)",
    ),
    _m(
        "trees_stopped",
        "counter",
        RUN,
        "committed",
        "problems left unsearched at the wall-time cap (run.json `stopped`)",
    ),
    _m(
        "nodes",
        "counter",
        RUN,
        "committed",
        "nodes of the committed trees, roots excluded (the sum of trees.n_nodes)",
    ),
    _m(
        "answered_nodes",
        "counter",
        RUN,
        "committed",
        "answered nodes of the committed trees, ungraded ones included (run.json "
        "`answered_nodes`, rows of the nodes table)",
    ),
    _m(
        "correct_nodes",
        "counter",
        RUN,
        "committed",
        "answered nodes labelled correct (run.json `correct_nodes`)",
    ),
    _m(
        "ungraded_nodes",
        "counter",
        RUN,
        "committed",
        "answered nodes left without a label: their comparison was cut off by its time limit",
    ),
    _m(
        "grade_timeouts",
        "counter",
        RUN,
        "committed",
        "answer comparisons cut off by their time limit or refused as too costly (run.json "
        "`grade_timeouts`)",
    ),
    _m(
        "spent_cost_units",
        "counter",
        RUN,
        "committed",
        "cost units the committed trees spent (the sum of trees.c_used; report.json `cost_units`)",
    ),
    _m(
        "prompt_tokens_sent",
        "counter",
        ENGINE,
        "board",
        "prompt tokens sent to the engine: every call's prompt (run.json engine_reads `sent`)",
    ),
    _m(
        "prompt_tokens_cached",
        "counter",
        ENGINE,
        "board",
        "of those, the tokens the engine read from its prefix cache (engine_reads `cached`); "
        "sent - cached is what it computed",
    ),
    _m(
        "output_tokens",
        "counter",
        ENGINE,
        "board",
        "tokens the engine generated (report.json `policy_output_tokens`, `prm_output_tokens`)",
    ),
    _m(
        "requests_retried",
        "counter",
        ENGINE,
        "board",
        "engine requests sent again after a failure or a time-out (`max_retries`)",
    ),
    _m(
        "requests_replayed",
        "counter",
        RUN,
        "board",
        "engine requests answered from a tree's request log instead of an engine (run.json "
        "`replayed_requests`)",
    ),
    _m(
        "answers_clamped",
        "counter",
        ENGINE,
        "board",
        "engine answers whose token counts could not be and were clamped",
    ),
    _m(
        "rows_written",
        "counter",
        ("run", "table"),
        "committed",
        "rows committed per table (record type), error rows included",
    ),
    _m(
        "rows_dropped",
        "counter",
        ("run", "table", "gate"),
        "committed",
        "training rows a quality gate kept out, per table and gate (trees.gate_drops)",
    ),
    _m(
        "error_rows",
        "counter",
        ("run", "stage"),
        "committed",
        "errors rows committed, per stage (source, search, engine, ...; run.json `errors`)",
    ),
    _m(
        "night_slice_start",
        "gauge",
        ("run", "date"),
        "nightly",
        "the night's first problem: its position in the source (the ledger's `skip`)",
    ),
    _m(
        "night_slice_end",
        "gauge",
        ("run", "date"),
        "nightly",
        "one past the night's last problem (`skip` + `limit`, top-ups included)",
    ),
    _m(
        "night_spent_cost_units",
        "gauge",
        ("run", "date"),
        "nightly",
        "cost units the night spent, as its ledger records it (with a spend cap)",
    ),
    _m(
        "night_spend_cap_cost_units",
        "gauge",
        ("run", "date"),
        "nightly",
        "the night's spend cap in cost units (`nightly.budget_per_night`)",
    ),
)
BY_NAME = {m.name.removeprefix(PREFIX): m for m in METRICS}

# The board's counters (`actors.progress.Counters`) each metric is fed from, and the
# engine a counter belongs to (the board names the scorer's counters `prm_`).
BOARD_RUN = {"trees_started": "trees_started", "replayed_requests": "requests_replayed"}
BOARD_ENGINE = {
    ("policy", "policy_prompt_sent_tokens"): "prompt_tokens_sent",
    ("policy", "policy_prompt_cached_tokens"): "prompt_tokens_cached",
    ("policy", "policy_output_tokens"): "output_tokens",
    ("policy", "policy_retried_requests"): "requests_retried",
    ("policy", "policy_clamped_answers"): "answers_clamped",
    ("scorer", "prm_input_tokens"): "prompt_tokens_sent",
    ("scorer", "prm_prompt_cached_tokens"): "prompt_tokens_cached",
    ("scorer", "prm_output_tokens"): "output_tokens",
    ("scorer", "prm_retried_requests"): "requests_retried",
    ("scorer", "prm_clamped_answers"): "answers_clamped",
}


class Recorder(Protocol):
    def inc(self, metric: Metric, value: float, tags: Mapping[str, str]) -> None: ...

    def set(self, metric: Metric, value: float, tags: Mapping[str, str]) -> None: ...

    def refresh(self) -> None:
        """Set every gauge again at its level (module docstring: a gauge not set again
        for two report intervals leaves the endpoint)."""


class RayRecorder:
    """Records through `ray.util.metrics`, one Ray metric object per metric, made on first
    use.  One recorder per run: its objects belong to the Ray connection they were made in
    (a test process may shut Ray down and start it again between runs).

    Metrics are an aid: a failure to record is logged once and never fails a run."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self._levels: dict[Any, tuple[Metric, float, dict[str, str]]] = {}  # gauges as set
        self._lock = threading.Lock()  # the board poller's thread and the driver's

    def _object(self, metric: Metric) -> Any:
        with self._lock:
            made = self._objects.get(metric.name)
            if made is None:
                from ray.util import metrics

                kind = metrics.Counter if metric.kind == "counter" else metrics.Gauge
                made = kind(metric.name, description=metric.help, tag_keys=metric.tags)
                self._objects[metric.name] = made
            return made

    def inc(self, metric: Metric, value: float, tags: Mapping[str, str]) -> None:
        if value > 0:  # Ray refuses an increment of 0
            self._record(metric, "inc", value, tags)

    def set(self, metric: Metric, value: float, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._levels[metric.name, tuple(sorted(tags.items()))] = (metric, value, dict(tags))
        self._record(metric, "set", value, tags)

    def refresh(self) -> None:
        with self._lock:
            levels = list(self._levels.values())
        for metric, value, tags in levels:
            self._record(metric, "set", value, tags)

    def _record(self, metric: Metric, how: str, value: float, tags: Mapping[str, str]) -> None:
        try:
            getattr(self._object(metric), how)(value, tags=dict(tags))
        except Exception as exc:
            if metric.name not in _warned:
                _warned.add(metric.name)
                log.warning("metric %s not recorded: %s", metric.name, exc)


_warned: set[str] = set()  # per process: one warning per metric that failed


def _number(value: Any) -> float:
    """A count from a row or a snapshot: 0 for null or anything not a number."""
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


class RunMetrics:
    """One invocation's metrics, tagged with its run id and engines (module docstring)."""

    def __init__(
        self, run_id: str, engines: Mapping[str, str], recorder: Recorder, budget: float
    ) -> None:
        self.run = {"run": run_id}
        self.engines = dict(engines)  # "policy" / "scorer" -> the engine's kind
        self.recorder = recorder
        self.budget = budget
        self.selected = 0
        self._seen: dict[str, float] = {}  # the board's counters at the last poll
        self._lock = threading.Lock()  # the poller thread and the driver both feed it

    @classmethod
    def for_run(cls, config: Any, recorder: Recorder | None = None) -> RunMetrics:
        """For a `RunConfig`: its run id, engine kinds and budget."""
        engines = {"policy": config.policy.engine.kind, "scorer": config.scorer.engine.kind}
        return cls(config.resolved_run_id, engines, recorder or RayRecorder(), config.budget)

    def _inc(self, name: str, value: float, **tags: str) -> None:
        self.recorder.inc(BY_NAME[name], value, self.run | tags)

    def _set(self, name: str, value: float, **tags: str) -> None:
        self.recorder.set(BY_NAME[name], value, self.run | tags)

    def select(self, trees: int) -> None:
        """The trees this invocation will search (`LiveProgress.set_total`'s number)."""
        with self._lock:
            self.selected = max(0, trees)
            self._set("trees_selected", self.selected)
            self._set("budget_cost_units", self.selected * self.budget)

    def tally(self, errors: list[dict[str, Any]], skipped: int) -> None:
        """A stream tally: bad source rows (committed as error rows) and problems an
        earlier invocation committed; neither is searched."""
        if errors:
            self.committed({"errors": errors})
        if errors or skipped:
            self.select(self.selected - len(errors) - skipped)

    def stopped(self) -> None:
        """A problem left unsearched at the wall-time cap."""
        with self._lock:
            self._inc("trees_stopped", 1)

    def committed(self, records: Mapping[str, list[dict[str, Any]]]) -> None:
        """One batch the driver committed: a searched problem's records (or error rows)."""
        with self._lock:
            for table, rows in records.items():
                self._inc("rows_written", len(rows), table=table)
            stages: dict[str, int] = {}
            for error in records.get("errors", []):
                stage = str(error.get("stage") or "unknown")
                stages[stage] = stages.get(stage, 0) + 1
            for stage, count in stages.items():
                self._inc("error_rows", count, stage=stage)
            if records.get("errors"):
                return  # as `RunSummary.account`: a failed search counts no tree
            trees = records.get("trees", [])
            nodes = records.get("nodes", [])
            self._inc("trees_committed", len(trees))
            self._inc("nodes", sum(_number(t.get("n_nodes")) for t in trees))
            self._inc("answered_nodes", len(nodes))
            self._inc("correct_nodes", sum(1 for n in nodes if n.get("label")))
            self._inc("ungraded_nodes", sum(1 for n in nodes if n.get("label") is None))
            self._inc("grade_timeouts", sum(_number(t.get("grade_timeouts")) for t in trees))
            self._inc("spent_cost_units", sum(_number(t.get("c_used")) for t in trees))
            for tree in trees:
                for drop in tree.get("gate_drops") or ():
                    table, _, gate = str(drop["gate"]).partition(".")
                    self._inc("rows_dropped", _number(drop["dropped"]), table=table, gate=gate)

    def board(self, snapshot: Mapping[str, Any]) -> None:
        """The progress board's counters: what grew since the last snapshot is added."""
        with self._lock:
            for key, name in BOARD_RUN.items():
                self._inc(name, self._grown(key, snapshot))
            for (engine, key), name in BOARD_ENGINE.items():
                kind = self.engines.get(engine, "")
                self._inc(name, self._grown(key, snapshot), engine=engine, engine_kind=kind)
            started = _number(snapshot.get("trees_started"))
            self._set("trees_in_flight", max(0.0, started - _number(snapshot.get("trees_done"))))
            self.recorder.refresh()  # the selection's gauges, set once, stay on the endpoint

    def _grown(self, key: str, snapshot: Mapping[str, Any]) -> float:
        now = _number(snapshot.get(key))
        grown = now - self._seen.get(key, 0.0)
        self._seen[key] = now  # a board that went back (a new one): counts on from there
        return grown if grown > 0 else 0.0

    def poll(self, fetch: Callable[[], Mapping[str, Any]], every_s: float = 1.0) -> BoardPoller:
        """A started `BoardPoller` feeding `board` from `fetch` (the board's snapshot)."""
        poller = BoardPoller(fetch, self.board, every_s)
        poller.start()
        return poller


class BoardPoller:
    """Polls the progress board on a thread; `stop()` polls once more, then ends it."""

    def __init__(
        self,
        fetch: Callable[[], Mapping[str, Any]],
        feed: Callable[[Mapping[str, Any]], None],
        every_s: float,
    ) -> None:
        self.fetch = fetch
        self.feed = feed
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-board", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll(self) -> None:
        with contextlib.suppress(Exception):  # a missed poll only delays the metrics
            self.feed(self.fetch())

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()

    def stop(self) -> None:
        """End the thread, then read the board a last time (its final counts)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self.poll()


_NIGHT: list[RayRecorder] = []  # the process's night recorder, kept fresh by a thread
REFRESH_S = 5.0  # well inside the two report intervals (10 s each by default) a gauge lasts


def _night_recorder() -> RayRecorder:
    """The recorder of a night's gauges, set again every `REFRESH_S` for as long as the
    process lives (a night's job goes on to publish after its last synthesis)."""
    with _NIGHT_LOCK:
        if not _NIGHT:
            recorder = RayRecorder()
            _NIGHT.append(recorder)

            def keep() -> None:
                while True:
                    time.sleep(REFRESH_S)
                    recorder.refresh()

            threading.Thread(target=keep, name="metrics-night", daemon=True).start()
        return _NIGHT[0]


_NIGHT_LOCK = threading.Lock()


def record_night(
    run_id: str,
    date: str,
    *,
    skip: int,
    limit: int,
    spent: float | None = None,
    spend_cap: float | None = None,
    recorder: Recorder | None = None,
) -> None:
    """A night's slice (and its spend and cap, when it has a cap) as gauges.

    Only where Ray is up (the night's synthesis started it): a night of an empty slice
    searches nothing, starts no Ray, and records nothing."""
    if recorder is None:
        ray = sys.modules.get("ray")  # not imported: not up (and no import just to ask)
        if ray is None or not ray.is_initialized():
            return
        recorder = _night_recorder()
    tags = {"run": run_id, "date": date}
    recorder.set(BY_NAME["night_slice_start"], skip, tags)
    recorder.set(BY_NAME["night_slice_end"], skip + limit, tags)
    if spent is not None:
        recorder.set(BY_NAME["night_spent_cost_units"], spent, tags)
    if spend_cap is not None:
        recorder.set(BY_NAME["night_spend_cap_cost_units"], spend_cap, tags)


FEEDS = {
    "selection": "the selection, less each tally",
    "committed": "each commit",
    "board": "progress board",
    "nightly": "nightly ledger",
}


def markdown_table() -> str:
    """docs/metrics.md's table of every metric (tests check the doc holds it as is)."""
    lines = [
        "| metric (as scraped) | type | tags | counts | from |",
        "|---|---|---|---|---|",
    ]
    for metric in METRICS:
        tags = ", ".join(f"`{tag}`" for tag in metric.tags)
        what = metric.help.replace("|", "\\|")
        lines.append(
            f"| `{metric.exported}` | {metric.kind} | {tags} | {what} | {FEEDS[metric.feed]} |"
        )
    return "\n".join(lines)
