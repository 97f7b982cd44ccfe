"""`python -m pipeline.report RUN_DIR [--out DIR] [--tree-pictures N]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.report.grid import report_tables, write_report
from pipeline.report.load import load_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", type=Path, help="folder with eval_trees/eval_nodes.parquet")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default run_dir)")
    parser.add_argument("--tree-pictures", type=int, default=2, help="problems to draw")
    args = parser.parse_args(argv)
    for name, frame in report_tables(load_run(args.run_dir)).items():
        print(f"== {name}\n{frame.to_string(index=False)}\n")
    files = write_report(args.run_dir, args.out, tree_pictures=args.tree_pictures)
    print(f"report: {files.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
