"""The run's live metrics on Ray's own Prometheus endpoint, scraped during a real run.

One real run on the test process's local Ray cluster (Ray Data, search actor, Serve
deployments, grading, Parquet sink) against the model-free load model, one tree at a time,
whose last problem is made slow on purpose (`slow_marker`): the first trees are committed
within seconds while the last runs on for 40 s or more, so the endpoint can be read while
the run is still going.  The endpoint is the node's metrics export port on 127.0.0.1, read
with prometheus_client's own parser.  Ray's metrics agent receives a process's metrics
every `metrics_report_interval_ms` (10 s by default), so every read waits with a bounded
poll for the figures to arrive.

What is checked:
* during the run (the run not yet returned, a tree in flight): trees committed and
  started, answered nodes and policy tokens above 0, the selection and its budget;
* after it: every metric equals what run.json, report.json and the committed Parquet say
  (trees, nodes, answered, correct and ungraded nodes, grading time-outs, cost units,
  prompt tokens sent and read from cache and output tokens per engine, rows per table,
  rows dropped per gate), no tree in flight, and Ray's own metrics beside them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import parse_run_config
from pipeline.report.run_report import REPORT_JSON
from pipeline.run.metrics import BY_NAME, record_night
from pipeline.run.summary import RunSummary
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import run_config

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("ray_cluster")]

RUN_ID = "metrics-endpoint"
NIGHT = "metrics-night-2026-12-05"
SLOW = "(this one is slow)"
BUDGET = 64
PROBLEMS = 6
# Ray's metrics agent takes a process's metrics every 10 s (metrics_report_interval_ms)
SETTLE_S = 60.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _port() -> int:
    """The metrics export port of the node this process (the run's driver) is on."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    (port,) = [n["MetricsExportPort"] for n in ray.nodes() if n["NodeID"] == here]
    return int(port)


def scrape(port: int) -> Samples:
    """Every sample on the endpoint: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def ours(samples: Samples, name: str, run: str = RUN_ID, **tags: str) -> float:
    """The sum of metric `name`'s samples of `run` whose tags include `tags`."""
    exported = BY_NAME[name].exported
    want = {"run": run, **tags}
    return sum(
        value
        for (sample, labels), value in samples.items()
        if sample == exported and want.items() <= dict(labels).items()
    )


def wait_for(port: int, ready: Callable[[Samples], bool], limit_s: float) -> Samples:
    """Scrape until `ready` holds (at most `limit_s`); the last scrape either way."""
    deadline = time.monotonic() + limit_s
    while True:
        samples = scrape(port)
        if ready(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run, scraped while it goes on: its summary, run folder and the scrapes."""
    from pipeline.run.synthesis import synthesize

    tmp = tmp_path_factory.mktemp("metrics")
    problems = tmp / "problems.jsonl"
    last = PROBLEMS - 1
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + {42 - i}?{' ' + SLOW if i == last else ''}"}
        | {"answer": "42" if i % 2 == 0 else str(i)}
        for i in range(PROBLEMS)
    ]
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # One tree at a time, in the file's order, the slow one last: every request of it stays
    # 80 times as many steps in the batch, so it runs on for about 40 s (more on a busy
    # machine) after the others are committed, whatever the load, while a commit reaches
    # the endpoint 10-15 s after it is made.
    engine = {"kind": "load_model", "output_tokens": 8, "answer_every": 2}
    config = parse_run_config(
        run_config(
            problems,
            tmp / "out",
            budget=BUDGET,
            engine=engine | {"slow_marker": SLOW, "slow_factor": 80},
            run_id=RUN_ID,
            actors=1,
            trees_per_actor=1,
            records={"decontamination": {"enabled": False}},
        )
    )
    summaries: list[RunSummary] = []
    failures: list[BaseException] = []

    def go() -> None:
        try:
            summaries.append(synthesize(config, progress=None))
        except BaseException as exc:  # raised again in the test's thread
            failures.append(exc)

    worker = threading.Thread(target=go, name="synthesize")
    started = time.monotonic()
    worker.start()
    port = _port()
    # a night's gauges, set once now: still on the endpoint after the run (a minute later)
    # only if they are set again, since Ray's agent drops a gauge left alone for 20 s
    record_night(NIGHT, "2026-12-05", skip=40, limit=6, spent=123.0, spend_cap=500.0)

    def progressed(samples: Samples) -> bool:
        """A commit and a tree in flight (not the moment between two trees), or the end.
        The driver counts a commit at once, the search actor's board a tree's start and
        end when it next reports: a tree the board still has in flight may be committed
        already, so the one in flight must be a tree started after the commits."""
        running = ours(samples, "trees_in_flight") >= 1
        committed = ours(samples, "trees_committed")
        later = ours(samples, "trees_started") >= committed + 1
        return (committed >= 1 and running and later) or not worker.is_alive()

    during = wait_for(port, progressed, JOB_DEADLINE_S)
    still_running = worker.is_alive()
    seen_s = time.monotonic() - started
    worker.join(JOB_DEADLINE_S)
    if failures:
        raise failures[0]
    assert summaries, "the run did not end within its deadline"
    return {
        "summary": summaries[0],
        "during": during,
        "still_running": still_running,
        "port": port,
        "run_s": time.monotonic() - started,
        "seen_s": seen_s,  # when the scrape `during` showed a commit
    }


def test_the_endpoint_shows_the_run_progressing_before_it_ends(run: dict[str, Any]) -> None:
    assert run["still_running"], "the run ended before its metrics reached the endpoint"
    during = run["during"]
    assert ours(during, "trees_committed") >= 1
    assert ours(during, "trees_started") >= ours(during, "trees_committed") + 1
    assert ours(during, "answered_nodes") > 0
    assert ours(during, "output_tokens", engine="policy", engine_kind="load_model") > 0
    assert ours(during, "trees_in_flight") == 1  # one tree at a time
    assert ours(during, "trees_selected") == PROBLEMS
    assert ours(during, "budget_cost_units") == PROBLEMS * BUDGET


def _expected(run_dir: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each metric's end value, from run.json, report.json and the committed Parquet (read
    as every reader of a run folder reads it: `RunFolder`)."""
    manifest = json.loads((run_dir / "run.json").read_text())["summary"]
    report = json.loads((run_dir / REPORT_JSON).read_text())
    folder = RunFolder.at(run_dir)
    trees = folder.read("trees").to_pylist()
    labels = folder.read("nodes").column("label").to_pylist()
    reads = manifest["engine_reads"]
    policy = (("engine", "policy"), ("engine_kind", "load_model"))
    scorer = (("engine", "scorer"), ("engine_kind", "load_model"))
    expected = {
        ("trees_committed", ()): manifest["searched"],
        ("trees_started", ()): manifest["searched"],
        ("trees_in_flight", ()): 0,
        ("nodes", ()): sum(t["n_nodes"] for t in trees),
        ("answered_nodes", ()): manifest["answered_nodes"],
        ("correct_nodes", ()): manifest["correct_nodes"],
        ("ungraded_nodes", ()): sum(label is None for label in labels),
        ("grade_timeouts", ()): manifest["grade_timeouts"],
        ("spent_cost_units", ()): report["cost_units"],
        ("prompt_tokens_sent", policy): reads["policy"]["sent"],
        ("prompt_tokens_cached", policy): reads["policy"]["cached"],
        ("output_tokens", policy): report["policy_output_tokens"],
        ("prompt_tokens_sent", scorer): reads["scorer"]["sent"],
        ("prompt_tokens_cached", scorer): reads["scorer"]["cached"],
        ("output_tokens", scorer): report["prm_output_tokens"],
        ("error_rows", ()): manifest["errors"],
    }
    for table, rows in folder.counts().items():  # every record type, errors included
        expected[("rows_written", (("table", table),))] = rows
    for tree in trees:
        for drop in tree["gate_drops"] or ():
            table, _, gate = drop["gate"].partition(".")
            key = ("rows_dropped", (("gate", gate), ("table", table)))
            expected[key] = expected.get(key, 0) + drop["dropped"]
    return expected


def test_at_the_end_the_metrics_say_what_run_json_and_the_parquet_say(
    run: dict[str, Any],
) -> None:
    summary = run["summary"]
    assert summary.searched == PROBLEMS and summary.errors == 0
    expected = _expected(Path(summary.run_dir))
    assert expected[("answered_nodes", ())] > 0 and expected[("correct_nodes", ())] > 0
    assert expected[("rows_written", (("table", "sft"),))] > 0

    def seen(samples: Samples) -> dict[Any, float]:
        return {key: ours(samples, key[0], **dict(key[1])) for key in expected}

    start = time.monotonic()
    last = wait_for(run["port"], lambda s: seen(s) == expected, SETTLE_S)
    settled = seen(last)
    labels = next(dict(lab) for (name, lab), _ in last.items() if name.startswith("ray_bgmcts_"))
    timing = f"run {run['run_s']:.0f} s (a commit seen at {run['seen_s']:.0f} s)"
    print(f"{timing}, settled {time.monotonic() - start:.0f} s later; {labels}")
    differ = {
        key: (settled[key], value) for key, value in expected.items() if settled[key] != value
    }
    assert not differ, f"metric: (scraped, expected) {differ}"


def test_ray_s_own_metrics_are_on_the_same_endpoint(run: dict[str, Any]) -> None:
    names = {name for name, _ in scrape(run["port"])}
    theirs = {n for n in names if n.startswith("ray_") and not n.startswith("ray_bgmcts_")}
    assert theirs, sorted(names)[:20]
    assert any(n.startswith("ray_serve_") for n in theirs), sorted(theirs)


def test_a_night_s_gauges_stay_on_the_endpoint_after_the_run(run: dict[str, Any]) -> None:
    """Set before the run, read after it: kept alive by being set again (`record_night`)."""
    assert run["run_s"] > 25  # longer than Ray's agent keeps a gauge nobody sets again
    samples = scrape(run["port"])
    day = {"run": NIGHT, "date": "2026-12-05"}
    assert ours(samples, "night_slice_start", **day) == 40
    assert ours(samples, "night_slice_end", **day) == 46
    assert ours(samples, "night_spent_cost_units", **day) == 123.0
    assert ours(samples, "night_spend_cap_cost_units", **day) == 500.0
