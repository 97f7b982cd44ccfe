"""The Grafana dashboard of a synthesis run's live metrics: jobs/grafana-dashboard.json.

    python -m jobs.grafana_dashboard            # writes jobs/grafana-dashboard.json

It has the form of Ray's own dashboards (the ones Ray's dashboard writes for Grafana:
`ray/dashboard/modules/metrics/dashboards/`): a Prometheus `datasource` variable, legacy
"graph" panels in a 24-column grid of two panels a row, each panel's `datasource` the
variable and its targets PromQL with a `legendFormat` and a `refId`.  A `run` variable
(the values of the metrics' `run` tag) filters every panel of ours, and Ray's
`SessionName` variable the panels of Ray's own metrics.  The metric names come from
`pipeline.run.metrics` (docs/metrics.md says what each counts), so a renamed metric
changes the dashboard; tests/jobs/test_grafana_dashboard.py checks the file against
this module and each query's metrics against what the project and Ray export.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.run.metrics import BY_NAME

OUT = Path(__file__).resolve().parent / "grafana-dashboard.json"
UID = "bgmctsSynthesis"
PANEL_WIDTH, PANEL_HEIGHT, ROW_HEIGHT = 12, 8, 1  # Ray's grid: two panels a row
RUN = 'run=~"$run"'
SESSION = 'SessionName=~"$SessionName"'


def m(name: str) -> str:
    """A metric of ours by its name in `pipeline.run.metrics`, as Prometheus has it."""
    return BY_NAME[name].exported


def ours(name: str, by: str = "run", how: str = "sum") -> str:
    return f"{how} by ({by}) ({m(name)}{{{RUN}}})"


def or_zero(name: str, like: str) -> str:
    """`ours(name)`, or 0 for each run of `like` where it has no series yet (a counter
    appears only when first counted; PromQL drops a series missing from either side)."""
    return f"({ours(name)} or {ours(like)} * 0)"


def rate(name: str, by: str = "run", window: str = "5m", per: str = "") -> str:
    return f"sum by ({by}) (rate({m(name)}{{{RUN}}}[{window}])){per}"


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    stack: bool = False


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Progress",
        (
            Panel(
                "Trees",
                "Trees committed to the run folder, started by the search actors, in flight "
                "now, and the trees this invocation searches (the dotted MAX line).",
                (
                    (ours("trees_committed"), "committed {{run}}"),
                    (ours("trees_started"), "started {{run}}"),
                    (ours("trees_in_flight"), "in flight {{run}}"),
                    (f"sum({m('trees_selected')}{{{RUN}}})", "MAX"),
                ),
            ),
            Panel(
                "Budget spent (cost units)",
                "Cost units the committed trees spent, against the most the selected trees "
                "may spend (trees x B, the dotted MAX line).",
                (
                    (ours("spent_cost_units"), "spent {{run}}"),
                    (f"sum({m('budget_cost_units')}{{{RUN}}})", "MAX"),
                ),
            ),
            Panel(
                "Trees committed per minute",
                "The rate trees are committed, over 5 minutes.",
                ((rate("trees_committed", per=" * 60"), "{{run}}"),),
            ),
            Panel(
                "Answered nodes",
                "Nodes of the committed trees; answered, correct and ungraded nodes.",
                (
                    (ours("nodes"), "nodes {{run}}"),
                    (ours("answered_nodes"), "answered {{run}}"),
                    (ours("correct_nodes"), "correct {{run}}"),
                    (ours("ungraded_nodes"), "ungraded {{run}}"),
                ),
            ),
            Panel(
                "Precision of answered nodes",
                "Correct answered nodes over graded ones (ungraded answers left out), as "
                "run.json's precision.",
                (
                    (
                        f"{or_zero('correct_nodes', 'answered_nodes')} / "
                        f"({ours('answered_nodes')} - "
                        f"{or_zero('ungraded_nodes', 'answered_nodes')})",
                        "{{run}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Grading time-outs",
                "Answer comparisons cut off by their time limit or refused (their answers "
                "stay ungraded or incorrect).",
                ((ours("grade_timeouts"), "{{run}}"),),
            ),
        ),
    ),
    (
        "Engines",
        (
            Panel(
                "Prompt tokens per second",
                "Prompt tokens sent to each engine, those it read from its prefix cache, and "
                "those it computed (sent - cached).",
                (
                    (rate("prompt_tokens_sent", "run, engine"), "sent {{engine}} {{run}}"),
                    (rate("prompt_tokens_cached", "run, engine"), "cached {{engine}} {{run}}"),
                    (
                        f"{rate('prompt_tokens_sent', 'run, engine')} - "
                        f"({rate('prompt_tokens_cached', 'run, engine')} or "
                        f"{rate('prompt_tokens_sent', 'run, engine')} * 0)",
                        "computed {{engine}} {{run}}",
                    ),
                ),
            ),
            Panel(
                "Prefix cache hit rate",
                "Of the prompt tokens sent to each engine over 5 minutes, the share it read "
                "from its prefix cache (the rest it computed).",
                (
                    (
                        f"{rate('prompt_tokens_cached', 'run, engine')} / "
                        f"{rate('prompt_tokens_sent', 'run, engine')}",
                        "{{engine}} {{run}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Output tokens per second",
                "Tokens each engine generated.",
                (
                    (
                        rate("output_tokens", "run, engine, engine_kind"),
                        "{{engine}} ({{engine_kind}})",
                    ),
                ),
            ),
            Panel(
                "Requests retried and replayed per minute",
                "Engine requests sent again after a failure or a time-out, and requests "
                "answered from a tree's request log instead of an engine.",
                (
                    (rate("requests_retried", "run, engine", per=" * 60"), "retried {{engine}}"),
                    (rate("requests_replayed", per=" * 60"), "replayed {{run}}"),
                ),
            ),
            Panel(
                "Answers with clamped token counts",
                "Engine answers whose token counts could not be (negative, not a number, "
                "more cached than sent) and were clamped.",
                ((ours("answers_clamped", "run, engine"), "{{engine}} {{run}}"),),
            ),
            Panel(
                "Engine replicas: queued requests",
                "Ray Serve's own metric: requests waiting for each deployment's replicas.",
                (
                    (
                        f"sum by (deployment) (ray_serve_deployment_queued_queries{{{SESSION}}})",
                        "{{deployment}}",
                    ),
                ),
            ),
        ),
    ),
    (
        "Data",
        (
            Panel(
                "Rows written per table",
                "Rows committed to each table (error rows included).",
                ((ours("rows_written", "run, table"), "{{table}} {{run}}"),),
            ),
            Panel(
                "Rows dropped per quality gate",
                "Training rows each quality gate kept out, per table and gate.",
                ((ours("rows_dropped", "run, table, gate"), "{{table}}.{{gate}} {{run}}"),),
            ),
            Panel(
                "Error rows per stage",
                "Problems that became error rows (retried by the next run), per stage.",
                ((ours("error_rows", "run, stage"), "{{stage}} {{run}}"),),
            ),
            Panel(
                "Problems left at the wall-time cap",
                "Problems not searched because the run reached max_wall_s.",
                ((ours("trees_stopped"), "{{run}}"),),
            ),
        ),
    ),
    (
        "Nightly",
        (
            Panel(
                "Night's slice",
                "The problems of the source the night searches: its first and one past "
                "its last (top-ups included).",
                (
                    (ours("night_slice_start", "run, date", "max"), "start {{date}}"),
                    (ours("night_slice_end", "run, date", "max"), "end {{date}}"),
                ),
            ),
            Panel(
                "Night's spend (cost units)",
                "What the night spent as its ledger records it, against its spend cap.",
                (
                    (ours("night_spent_cost_units", "run, date", "max"), "spent {{date}}"),
                    (ours("night_spend_cap_cost_units", "run, date", "max"), "MAX"),
                ),
            ),
        ),
    ),
    (
        "Cluster (Ray's metrics)",
        (
            Panel(
                "Node CPU utilisation",
                "Ray's own metric: each node's CPU use.",
                (
                    (
                        f"avg by (instance) (ray_node_cpu_utilization{{{SESSION}}}) / 100",
                        "{{instance}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "GPU utilisation",
                "Ray's own metric: each GPU's use.",
                (
                    (
                        f"avg by (instance, GpuIndex) (ray_node_gpus_utilization{{{SESSION}}}) "
                        "/ 100",
                        "{{instance}} GPU {{GpuIndex}}",
                    ),
                ),
                unit="percentunit",
            ),
        ),
    ),
)

# Ray's legacy graph panel, as its dashboards write it (the parts that matter here)
GRAPH = {
    "aliasColors": {},
    "bars": False,
    "dashLength": 10,
    "dashes": False,
    "fieldConfig": {"defaults": {}, "overrides": []},
    "fill": 0,
    "fillGradient": 0,
    "hiddenSeries": False,
    "legend": {
        "alignAsTable": True,
        "avg": False,
        "current": True,
        "max": True,
        "min": False,
        "show": True,
        "total": False,
        "values": True,
    },
    "lines": True,
    "linewidth": 1,
    "nullPointMode": None,
    "options": {"alertThreshold": True},
    "percentage": False,
    "pluginVersion": "7.5.17",
    "pointradius": 2,
    "points": False,
    "renderer": "flot",
    # as Ray's: a series called MAX is a dotted line, not a filled area
    "seriesOverrides": [
        {"alias": "MAX", "dashes": True, "color": "#1F60C4", "fill": 0, "stack": False}
    ],
    "spaceLength": 10,
    "steppedLine": False,
    "thresholds": [],
    "timeFrom": None,
    "timeRegions": [],
    "timeShift": None,
    "tooltip": {"shared": True, "sort": 0, "value_type": "individual"},
    "type": "graph",
    "xaxis": {"buckets": None, "mode": "time", "name": None, "show": True, "values": []},
    "yaxis": {"align": False, "alignLevel": None},
}


def _variable(name: str, description: str, query: str) -> dict[str, Any]:
    return {
        "allValue": ".+",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": "${datasource}",
        "definition": query,
        "description": description,
        "hide": 0,
        "includeAll": True,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"query": query, "refId": "StandardVariableQuery"},
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 2,
        "type": "query",
    }


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    yaxis = {"format": panel.unit, "label": "", "logBase": 1, "max": None, "min": "0"}
    return {
        **GRAPH,
        "datasource": "${datasource}",
        "description": panel.description,
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "id": panel_id,
        "stack": panel.stack,
        "targets": [
            {"exemplar": True, "expr": expr, "interval": "", "legendFormat": legend}
            | {"refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(panel.targets)
        ],
        "title": panel.title,
        "yaxes": [{**yaxis, "show": True}, {**yaxis, "format": "short", "show": False}],
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for title, row in ROWS:
        panels.append(
            {
                "collapsed": False,
                "gridPos": {"h": ROW_HEIGHT, "w": 2 * PANEL_WIDTH, "x": 0, "y": y},
                "id": next_id,
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        next_id += 1
        y += ROW_HEIGHT
        for i, panel in enumerate(row):
            panels.append(
                _panel(panel, next_id, PANEL_WIDTH * (i % 2), y + PANEL_HEIGHT * (i // 2))
            )
            next_id += 1
        y += PANEL_HEIGHT * ((len(row) + 1) // 2)
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": "-- Grafana --",
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": "BG-MCTS synthesis runs: trees, budget, tokens per engine, rows and "
        "drops per table (docs/metrics.md)",
        "editable": True,
        "gnetId": None,
        "graphTooltip": 1,
        "links": [],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": 27,
        "style": "dark",
        "tags": ["bgmcts", "ray"],
        "templating": {
            "list": [
                {
                    "current": {"selected": False},
                    "description": "Filter queries of a specific Prometheus type.",
                    "hide": 2,
                    "includeAll": False,
                    "multi": False,
                    "name": "datasource",
                    "options": [],
                    "query": "prometheus",
                    "refresh": 1,
                    "regex": "",
                    "skipUrlSync": False,
                    "type": "datasource",
                },
                _variable(
                    "run",
                    "Filter queries to synthesis runs by their run id.",
                    f"label_values({m('trees_selected')}, run)",
                ),
                _variable(
                    "SessionName",
                    "Filter Ray's own metrics to specific Ray sessions.",
                    "label_values(ray_node_cpu_utilization, SessionName)",
                ),
            ]
        },
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "BG-MCTS synthesis",
        "uid": UID,
        "version": 1,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> int:
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
