"""Anytime figures: one PNG per metric, one line per method, markers at the nominal budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from pipeline.report.anytime import METRICS

DPI = 120
# one shape per method, so coinciding budget dots of two methods stay distinguishable
SHAPES = ("o", "s", "D", "^", "v", "P", "X", "<", ">", "h")
FIGURE_FILES = {metric: f"{metric}_vs_tokens.png" for metric in METRICS}
_LABELS = {
    "accuracy": ("Accuracy", "Accuracy vs. consumed tokens"),
    "answered_rate": (
        "Answer-reach rate (trees with an answered node)",
        "Answer-reach rate vs. consumed tokens",
    ),
    "depth": ("Average maximum depth", "Maximum tree depth vs. consumed tokens"),
    "width": ("Average maximum width", "Maximum tree width vs. consumed tokens"),
}


def tokens_label(value: float) -> str:
    """10000 -> '10K', 1200 -> '1.2K', 1824.5 -> '1.82K', 600 -> '600' (the paper's labels)."""
    if abs(value) >= 1000:
        return f"{value / 1000:.3g}K"
    return f"{value:.4g}"


def plot_metric(
    curves: Any, markers: Any, metric: str, path: Path, *, redistributed: list[str]
) -> Path:
    """Draw `metric` against mean consumed tokens for every method; write `path`."""
    axis_label, title = _LABELS[metric]
    fig, ax = plt.subplots(figsize=(10.5, 5.2), dpi=DPI)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    methods = [str(m) for m in dict.fromkeys(curves["method"])]
    handles: list[Line2D] = []
    for i, method in enumerate(methods):
        color = colors[i % len(colors)]
        curve = curves[curves["method"] == method]
        label = f"{method} (App. C redistributed)" if method in redistributed else method
        shape = SHAPES[i % len(SHAPES)]
        ax.plot(curve["tokens"], curve[metric], color=color, linewidth=1.8)
        handles.append(
            Line2D([], [], color=color, marker=shape, markeredgecolor="black", label=label)
        )
        mark = markers[markers["method"] == method]
        ax.scatter(
            mark["tokens"],
            mark[metric],
            color=color,
            marker=shape,
            edgecolors="black",
            s=75 - 15 * (i % 4),  # later methods smaller and on top: overlaps show both
            zorder=3 + i,
        )
    for budget in sorted(set(int(b) for b in markers["budget"])):
        ax.axvline(budget, color="0.75", linestyle=":", linewidth=1, zorder=0)
        ax.annotate(
            f"B={tokens_label(budget)}",
            (budget, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(-3, -12),
            textcoords="offset points",
            ha="right",
            fontsize=8,
            color="0.4",
        )
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: tokens_label(x)))
    ax.set_xlabel("Consumed tokens (mean C_used per tree)")
    ax.set_ylabel(axis_label)
    ax.set_title(f"{title}\nlines: largest-budget traces; dots: each budget's own runs")
    if metric in ("accuracy", "answered_rate"):
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    # outside the axes: with the paper's nine methods any inside spot hides curves
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_curves(
    curves: Any, markers: Any, out_dir: Path, *, redistributed: list[str]
) -> list[Path]:
    """All four anytime figures into `out_dir`."""
    return [
        plot_metric(curves, markers, metric, out_dir / name, redistributed=redistributed)
        for metric, name in FIGURE_FILES.items()
    ]
