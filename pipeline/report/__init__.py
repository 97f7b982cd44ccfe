"""Reports read from Parquet: the evaluation report, the run report, data hygiene.

The evaluation report (an evaluation's run folder in, paper-style tables, anytime curves
and tree pictures out):

    write_report(run_dir) -> ReportFiles   # accuracy / answered_nodes / prm_percentiles
                                           # (.md + .csv), four *_vs_tokens.png,
                                           # trees_<method>_<problem>.png, report.md

The table functions return pandas DataFrames, for tests and the CLI
(`python -m pipeline.report RUN_DIR`).  Its modules: `load` (the two tables and the
anytime traces), `tables`, `anytime` and `curves` (the figures), `trees` (tree pictures),
`yields` (training data per 1,000 tokens), `markdown`, and `grid` (`write_report`).

`run_report` writes a synthesis run's report (report.md, report.json, PNGs) into its run
folder, reusing the evaluation code (a run is read as a one-method, one-budget grid);
`hygiene` counts a run's training rows with the faults a person about to train on them
checks for (text past the answer, no answer, a truncated answer, ...).
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
