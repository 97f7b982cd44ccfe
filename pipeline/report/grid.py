"""`write_report`: one run folder in, tables (Markdown + CSV), PNGs and report.md out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.report.anytime import (
    anytime_curves,
    budget_markers,
    early_stopping_methods,
)
from pipeline.report.curves import write_curves
from pipeline.report.load import RunData, load_run
from pipeline.report.markdown import (
    accuracy_markdown,
    answered_markdown,
    percentiles_markdown,
    report_markdown,
)
from pipeline.report.tables import (
    accuracy_table,
    answered_nodes_table,
    prm_percentiles_table,
)
from pipeline.report.trees import pick_problems, write_tree_pictures
from pipeline.report.yields import (
    YIELD_FIGURE,
    has_yield,
    plot_yield,
    yield_markdown,
    yield_table,
)

REPORT_FILE = "report.md"


@dataclass(frozen=True)
class ReportFiles:
    """What `write_report` wrote; every path lies in `out_dir`."""

    out_dir: Path
    report: Path
    tables: dict[str, Path] = field(default_factory=dict)  # e.g. "accuracy.csv" -> path
    figures: list[Path] = field(default_factory=list)  # the anytime PNGs, then the yield PNG
    tree_pictures: list[Path] = field(default_factory=list)

    @property
    def all(self) -> list[Path]:
        return [self.report, *self.tables.values(), *self.figures, *self.tree_pictures]


def report_tables(run: RunData) -> dict[str, Any]:
    """The tables as DataFrames, by file stem (`yield` only where the trees carry it)."""
    tables = {
        "accuracy": accuracy_table(run.trees),
        "answered_nodes": answered_nodes_table(run.trees),
        "prm_percentiles": prm_percentiles_table(run.nodes, run.methods),
    }
    if has_yield(run.trees):
        tables["yield"] = yield_table(run.trees, run.methods)
    return tables


_RENDER = {
    "accuracy": accuracy_markdown,
    "answered_nodes": answered_markdown,
    "prm_percentiles": percentiles_markdown,
    "yield": yield_markdown,
}


def write_report(
    run_dir: Path, out_dir: Path | None = None, *, tree_pictures: int = 2
) -> ReportFiles:
    """Read `run_dir`'s eval Parquet files and write the report into `out_dir` (default run_dir)."""
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir
    out.mkdir(parents=True, exist_ok=True)
    run = load_run(run_dir)

    written: dict[str, Path] = {}
    markdown: dict[str, str] = {}
    tables = report_tables(run)
    for name, frame in tables.items():
        markdown[name] = _RENDER[name](frame)
        written[f"{name}.csv"] = out / f"{name}.csv"
        frame.to_csv(written[f"{name}.csv"], index=False)
        written[f"{name}.md"] = out / f"{name}.md"
        written[f"{name}.md"].write_text(markdown[name] + "\n", encoding="utf-8")

    redistributed = early_stopping_methods(run.trees)
    figures = write_curves(
        anytime_curves(run), budget_markers(run), out, redistributed=redistributed
    )
    if "yield" in tables:
        figures.append(plot_yield(tables["yield"], out / YIELD_FIGURE))
    pictures = write_tree_pictures(run, out, tree_pictures)
    budget_seed = pick_problems(run, 0)[:2] if pictures else None

    report = out / REPORT_FILE
    report.write_text(
        report_markdown(run, markdown, figures, pictures, redistributed, budget_seed=budget_seed),
        encoding="utf-8",
    )
    return ReportFiles(
        out_dir=out,
        report=report,
        tables=written,
        figures=figures,
        tree_pictures=[p for paths in pictures.values() for p in paths],
    )
