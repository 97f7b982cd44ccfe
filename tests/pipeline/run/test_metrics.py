"""What the run's metrics count, from the numbers the driver already has (fast tier).

`pipeline.run.metrics` records through Ray's `ray.util.metrics`; here a recorder that
keeps what it is given stands in for Ray's, so that each rule can be checked in
milliseconds.  The real endpoint, scraped during a real run and compared with run.json,
is tests/pipeline/run/test_metrics_endpoint.py's.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import pytest

from actors.config import ServiceConfig
from actors.progress import Counters
from actors.serve import ServePolicy, _Resilience
from pipeline.run.metrics import (
    BOARD_ENGINE,
    BOARD_RUN,
    BY_NAME,
    METRICS,
    PREFIX,
    BoardPoller,
    Metric,
    RunMetrics,
    record_night,
)


class Kept:
    """Keeps every increment and level, checking tags as Ray does (each declared key, and
    no other, since Ray refuses a record that lacks one)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.levels: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def _key(self, metric: Metric, tags: Mapping[str, str]) -> Any:
        assert set(tags) == set(metric.tags), (metric.name, dict(tags))
        assert all(isinstance(v, str) for v in tags.values())
        return metric.name.removeprefix(PREFIX), tuple(sorted(tags.items()))

    def inc(self, metric: Metric, value: float, tags: Mapping[str, str]) -> None:
        assert metric.kind == "counter" and value >= 0
        key = self._key(metric, tags)
        self.counts[key] = self.counts.get(key, 0) + value

    def set(self, metric: Metric, value: float, tags: Mapping[str, str]) -> None:
        assert metric.kind == "gauge"
        self.levels[self._key(metric, tags)] = value

    def refresh(self) -> None:
        self.refreshed = getattr(self, "refreshed", 0) + 1

    def count(self, name: str, **tags: str) -> float:
        return self.counts.get((name, tuple(sorted({"run": "r1", **tags}.items()))), 0)

    def level(self, name: str, **tags: str) -> float | None:
        return self.levels.get((name, tuple(sorted({"run": "r1", **tags}.items()))))


def _metrics() -> tuple[RunMetrics, Kept]:
    kept = Kept()
    return RunMetrics("r1", {"policy": "vllm", "scorer": "genprm_engine"}, kept, 100.0), kept


def _tree(n_nodes: int, c_used: float, timeouts: int, drops: list[tuple[str, int]]) -> Any:
    gate_drops = [{"gate": gate, "dropped": n} for gate, n in drops]
    return {
        "n_nodes": n_nodes,
        "c_used": c_used,
        "grade_timeouts": timeouts,
        "gate_drops": gate_drops,
    }


def test_a_committed_tree_counts_its_rows_nodes_spend_and_drops() -> None:
    metrics, kept = _metrics()
    metrics.committed(
        {
            "trees": [_tree(12, 96.0, 1, [("dpo.duplicate", 3), ("sft.truncated", 1)])],
            "tree_nodes": [{}] * 13,
            "nodes": [{"label": True}, {"label": False}, {"label": None}],
            "sft": [{}],
            "dpo": [],
        }
    )
    metrics.committed({"trees": [_tree(5, 40.5, 0, [("dpo.duplicate", 2)])], "nodes": []})
    assert kept.count("trees_committed") == 2
    assert kept.count("nodes") == 17
    assert kept.count("answered_nodes") == 3
    assert kept.count("correct_nodes") == 1
    assert kept.count("ungraded_nodes") == 1
    assert kept.count("grade_timeouts") == 1
    assert kept.count("spent_cost_units") == 136.5
    assert kept.count("rows_written", table="trees") == 2
    assert kept.count("rows_written", table="tree_nodes") == 13
    assert kept.count("rows_written", table="sft") == 1
    assert kept.count("rows_written", table="dpo") == 0
    assert kept.count("rows_dropped", table="dpo", gate="duplicate") == 5
    assert kept.count("rows_dropped", table="sft", gate="truncated") == 1


def test_a_failed_search_counts_its_error_rows_and_no_tree() -> None:
    metrics, kept = _metrics()
    metrics.committed({"errors": [{"stage": "search"}, {"stage": "engine"}, {"stage": "search"}]})
    assert kept.count("error_rows", stage="search") == 2
    assert kept.count("error_rows", stage="engine") == 1
    assert kept.count("rows_written", table="errors") == 3
    assert kept.count("trees_committed") == 0


def test_tallies_leave_out_what_is_not_searched_from_the_selection_and_the_budget() -> None:
    metrics, kept = _metrics()
    metrics.select(10)
    assert kept.level("trees_selected") == 10 and kept.level("budget_cost_units") == 1000
    metrics.tally([{"stage": "source"}], skipped=3)
    assert kept.level("trees_selected") == 6 and kept.level("budget_cost_units") == 600
    assert kept.count("error_rows", stage="source") == 1
    metrics.stopped()
    assert kept.count("trees_stopped") == 1


def test_board_snapshots_add_only_what_grew_per_engine() -> None:
    metrics, kept = _metrics()
    first = {"trees_started": 4, "trees_done": 1, "policy_prompt_sent_tokens": 100}
    metrics.board(first | {"prm_input_tokens": 50, "prm_output_tokens": 7})
    metrics.board(first)  # the same snapshot again: nothing more
    later = {"trees_started": 6, "trees_done": 5, "policy_prompt_sent_tokens": 160}
    metrics.board(later | {"policy_retried_requests": 2, "replayed_requests": 1})
    policy = {"engine": "policy", "engine_kind": "vllm"}
    scorer = {"engine": "scorer", "engine_kind": "genprm_engine"}
    assert kept.count("trees_started") == 6
    assert kept.level("trees_in_flight") == 1
    assert kept.count("prompt_tokens_sent", **policy) == 160
    assert kept.count("prompt_tokens_sent", **scorer) == 50
    assert kept.count("output_tokens", **scorer) == 7
    assert kept.count("requests_retried", **policy) == 2
    assert kept.count("requests_replayed") == 1
    assert kept.refreshed == 3  # every poll sets the gauges again: Ray's agent drops stale ones


def test_every_board_counter_a_metric_reads_is_one_the_board_keeps() -> None:
    kept = {f.name for f in fields(Counters)}
    read = set(BOARD_RUN) | {key for _, key in BOARD_ENGINE}
    assert read <= kept, read - kept
    assert {*BOARD_RUN.values(), *(name for name in BOARD_ENGINE.values())} <= set(BY_NAME)


def test_names_follow_prometheus_conventions() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for metric in METRICS:
        assert metric.name.startswith(PREFIX) and metric.name.islower(), metric.name
        assert not metric.name.endswith("_total"), "Ray's exporter adds _total to counters"
        assert metric.tags[0] == "run" and metric.help, metric.name
    assert BY_NAME["trees_committed"].exported == "ray_bgmcts_trees_committed_total"
    assert BY_NAME["trees_in_flight"].exported == "ray_bgmcts_trees_in_flight"


def test_the_poller_reads_the_board_once_more_when_stopped() -> None:
    snapshots = iter([{"trees_started": 2}, {"trees_started": 5}])
    seen: list[Mapping[str, Any]] = []
    poller = BoardPoller(lambda: next(snapshots), seen.append, every_s=3600)
    poller.start()
    poller.stop()  # no poll in the hour: stop's own read is the first
    assert seen == [{"trees_started": 2}]


def test_a_night_records_its_slice_spend_and_cap() -> None:
    kept = Kept()
    record_night("r1", "2026-12-05", skip=40, limit=20, spent=123.0, spend_cap=500.0, recorder=kept)
    day = {"date": "2026-12-05"}
    assert kept.level("night_slice_start", **day) == 40
    assert kept.level("night_slice_end", **day) == 60
    assert kept.level("night_spent_cost_units", **day) == 123.0
    assert kept.level("night_spend_cap_cost_units", **day) == 500.0


def test_each_retry_of_a_request_is_counted() -> None:
    retries: list[int] = []
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise ConnectionError("replica lost")
        return "ok"

    resilience = _Resilience(timeout_s=5, retries=3, backoff_s=0.001)
    resilience.on_retry = lambda: retries.append(1)
    assert asyncio.run(resilience.call("call", flaky)) == "ok"
    assert len(retries) == 2


def test_a_copy_of_a_serve_client_does_not_count_into_the_original() -> None:
    """A pickled copy (as Ray ships one) drops the callback: a closure does not pickle."""
    service = ServiceConfig(engine={"kind": "load_model"})
    client = ServePolicy(handle=None, service=service)  # type: ignore[arg-type]
    client.count_retries(lambda: None)
    copy = pickle.loads(pickle.dumps(client))
    assert copy._resilience.on_retry is None
    assert client._resilience.on_retry is not None


@pytest.mark.parametrize("value", [0, -1])
def test_ray_recorder_skips_increments_ray_would_refuse(value: int) -> None:
    from pipeline.run.metrics import RayRecorder

    RayRecorder().inc(BY_NAME["trees_committed"], value, {"run": "r1"})  # no error, no metric


def test_the_docs_list_every_metric_as_recorded() -> None:
    """docs/metrics.md holds the table `markdown_table` writes from `METRICS`."""
    from pathlib import Path

    from pipeline.run.metrics import markdown_table

    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    assert markdown_table() in doc, "paste pipeline.run.metrics.markdown_table() into the doc"


def test_the_search_actor_counts_each_engine_s_retries_on_its_board_counters() -> None:
    from types import SimpleNamespace

    from pipeline.run.search_actor import SearchActor

    actor = SimpleNamespace(counters=Counters())
    policy, scorer = SearchActor._retried(actor, "policy"), SearchActor._retried(actor, "prm")  # type: ignore[arg-type]
    policy()
    policy()
    scorer()
    taken = actor.counters.take()
    assert taken["policy_retried_requests"] == 2 and taken["prm_retried_requests"] == 1
