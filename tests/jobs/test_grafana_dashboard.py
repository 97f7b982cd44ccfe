"""jobs/grafana-dashboard.json, checked as far as can be without a Grafana.

No Grafana and no schema of Grafana's dashboard JSON can be had here (the Python
`grafana-foundation-sdk` decodes a dashboard without checking it), so this states what it
checks instead:

* the file is valid JSON and is what `jobs.grafana_dashboard` writes (regenerated, equal);
* the dashboard has Ray's dashboards' form: a uid, a title, an integer schemaVersion, a
  Prometheus `datasource` variable; the `run` variable, read from a metric of ours;
* panel ids are unique (rows included); every panel lies inside the 24-column grid;
* every panel but a row has the `${datasource}` datasource and at least one target, each
  with a unique refId and a legend;
* every target's expr parses as PromQL (promql-parser, the Rust parser's binding), and
  every metric it reads is one this project exports (`pipeline.run.metrics`, by the name
  Prometheus shows) or one of Ray's own (a name Ray's own Grafana dashboards query);
* every label a query of ours filters or groups by is one of the metric's tags; every
  `$variable` in a query is a variable of the dashboard;
* every metric of ours is on some panel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest

from jobs import grafana_dashboard
from pipeline.run.metrics import METRICS

REPO = Path(__file__).resolve().parents[2]
FILE = REPO / "jobs" / "grafana-dashboard.json"
OURS = {m.exported: m for m in METRICS}
# labels Ray's metrics agent and Prometheus put on every series
SERIES_LABELS = {"SessionName", "instance", "job", "NodeAddress", "Component", "WorkerId"}


def ray_metric_names() -> set[str]:
    """The metrics Ray's own Grafana dashboards query (their panel definitions in the
    installed Ray): Ray's names, as it exports them."""
    import ray.dashboard.modules.metrics.dashboards as ray_dashboards

    folder = Path(ray_dashboards.__file__).parent
    text = "".join(p.read_text() for p in folder.glob("*_panels.py"))
    return set(re.findall(r"\bray_[a-z0-9_]+", text)) - {"ray_io_cluster"}


def selectors(node: Any) -> Iterator[Any]:
    """Every vector selector in a parsed PromQL expression."""
    if type(node).__name__ == "VectorSelector":
        yield node
    for attribute in ("expr", "lhs", "rhs", "args", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        for item in child if isinstance(child, list) else [child]:
            if type(item).__module__.startswith("promql_parser"):
                yield from selectors(item)


def groupings(node: Any) -> Iterator[list[str]]:
    """The labels of every `by (...)` in a parsed expression."""
    modifier = getattr(node, "modifier", None)
    if type(node).__name__ == "AggregateExpr" and modifier is not None:
        yield list(modifier.labels)
    for attribute in ("expr", "lhs", "rhs", "args", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        for item in child if isinstance(child, list) else [child]:
            if type(item).__module__.startswith("promql_parser"):
                yield from groupings(item)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FILE.read_text())
    return loaded


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    flat = []
    for panel in dashboard["panels"]:
        flat.append(panel)
        flat.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return flat


def test_the_file_is_what_the_generator_writes(dashboard: dict[str, Any]) -> None:
    assert FILE.read_text() == grafana_dashboard.render(), "run python -m jobs.grafana_dashboard"


def test_it_has_the_form_of_ray_s_dashboards(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    run = variables["run"]
    assert run["type"] == "query" and run["includeAll"] and run["multi"]
    assert re.fullmatch(r"label_values\((\w+), run\)", run["definition"])
    read = re.fullmatch(r"label_values\((\w+), run\)", run["definition"])
    assert read is not None and read.group(1) in OURS


def test_panel_ids_are_unique_and_panels_lie_in_the_grid(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]


def test_every_panel_reads_the_datasource_through_targets(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == "${datasource}", panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"] and t["legendFormat"] for t in panel["targets"]), panel["title"]


def test_every_query_reads_metrics_that_exist_by_their_tags(dashboard: dict[str, Any]) -> None:
    theirs = ray_metric_names()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            expr = target["expr"]
            parsed = promql_parser.parse(expr)  # raises on a query Prometheus would refuse
            assert set(re.findall(r"\$(\w+)", expr)) <= variables, expr
            for selector in selectors(parsed):
                name = selector.name
                assert name in OURS or name in theirs, f"{panel['title']}: {name}"
                if name in OURS:
                    labels = {m.name for m in selector.matchers.matchers}
                    assert labels <= set(OURS[name].tags), f"{panel['title']}: {labels}"
            if any(s.name in OURS for s in selectors(parsed)):
                tags = set().union(*(OURS[s.name].tags for s in selectors(parsed)))
                for labels in groupings(parsed):
                    assert set(labels) <= tags | SERIES_LABELS, f"{panel['title']}: {labels}"


def test_every_metric_of_ours_is_on_a_panel(dashboard: dict[str, Any]) -> None:
    shown = {
        s.name
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        for s in selectors(promql_parser.parse(target["expr"]))
    }
    assert set(OURS) - shown == set()


def test_the_checks_catch_a_metric_that_does_not_exist(dashboard: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(dashboard))
    target = next(p for p in panels(broken) if p["type"] != "row")["targets"][0]
    target["expr"] = target["expr"].replace("ray_bgmcts_trees_committed_total", "ray_bgmcts_tree")
    with pytest.raises(AssertionError, match="ray_bgmcts_tree"):
        test_every_query_reads_metrics_that_exist_by_their_tags(broken)
