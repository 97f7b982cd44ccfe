"""The evaluation report: Parquet in, paper-style tables, anytime curves, tree pictures out.

    write_report(run_dir) -> ReportFiles   # accuracy / answered_nodes / prm_percentiles
                                           # (.md + .csv), four *_vs_tokens.png,
                                           # trees_<method>_<problem>.png, report.md

The table functions return pandas DataFrames, for tests and the CLI.
"""

from pipeline.report.anytime import anytime_curves, budget_markers
from pipeline.report.grid import ReportFiles, report_tables, write_report
from pipeline.report.load import RunData, load_run, read_trees
from pipeline.report.tables import (
    accuracy_table,
    answered_nodes_table,
    prm_percentiles_table,
)
from pipeline.report.trees import tree_layout

__all__ = [
    "ReportFiles",
    "RunData",
    "accuracy_table",
    "answered_nodes_table",
    "anytime_curves",
    "budget_markers",
    "load_run",
    "prm_percentiles_table",
    "read_trees",
    "report_tables",
    "tree_layout",
    "write_report",
]
