"""Evaluation job: methods x budgets x seeds over a problem set, graded, with a report.

    python -m jobs.evaluate --config configs/eval-sim.yaml        # simulated, seconds
    python -m jobs.evaluate --config configs/eval-gsm8k-smollm2.yaml   # real model, CPU

Writes <output_dir>/<name>/: eval_trees.parquet, eval_nodes.parquet, meta.json,
accuracy.md/.csv, answered_nodes.md/.csv, prm_percentiles.md/.csv, PNG plots and
report.md.  Exit status: 0 done, 1 some searches failed (listed in meta.json),
2 bad config.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from jobs.exits import FAILED, OK, add_verbose, guarded, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="configs/eval-sim.yaml", help="YAML eval config")
    parser.add_argument("--output-dir", help="overrides output_dir of the config")
    parser.add_argument("--name", help="overrides name (the report folder under output_dir)")
    add_verbose(parser)


def report_folder(folder: Path, *, rewrite: bool = True) -> int:
    """(Re)write the report of an evaluation folder and print its accuracy table."""
    from pipeline.report import accuracy_table, read_trees, write_report

    if rewrite:
        write_report(folder)
    print(accuracy_table(read_trees(folder)).to_string())
    print(f"report: {folder / 'report.md'}")
    return 0


def run(args: argparse.Namespace) -> int:
    return guarded(lambda: _run(args), verbose=args.verbose)


def _run(args: argparse.Namespace) -> int:
    from pipeline.config import check_submitted_output_root, load_config
    from pipeline.evaluation.config import EvalConfig

    config = load_config(args.config, EvalConfig, output_dir=args.output_dir, name=args.name)
    check_submitted_output_root(config.output_dir, str(args.config), field="output_dir")
    from pipeline.evaluation.runner import run_evaluation

    label = f"searches ({config.environment.kind})"
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(f"{label}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            task = bar.add_task(label, total=None)
            folder = run_evaluation(
                config, lambda done, total: bar.update(task, completed=done, total=total)
            )
    else:  # logs (ray job logs, nohup): one plain line at most every 10 s
        from pipeline.run.live import ProgressLine

        line, start = ProgressLine(), time.monotonic()

        def show(done: int, total: int) -> None:
            elapsed = time.monotonic() - start
            line.show(f"{label}: {done}/{total} ({elapsed:.0f}s)", final=done == total)

        folder = run_evaluation(config, show)
    report_folder(folder, rewrite=False)
    meta = json.loads((folder / "meta.json").read_text())
    print(f"{meta['searches']} searches in {meta['wall_time_s']:.1f}s")
    if meta["failed_searches"]:
        print(
            f"error: {len(meta['failed_searches'])} searches failed (see meta.json)",
            file=sys.stderr,
        )
        return FAILED
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
