"""Data hygiene of a run's training tables (issue 22): print the table, no assertions.

Reads a run folder that `make synth` (or any run) wrote and checks every training row
as `pipeline.report.hygiene` says: text after the answer, more than one answer
statement, truncated, more than one prompt for a problem, a rejected text stating the
reference, prm steps that do not rebuild their trajectory, kto labels against grading.
The last line is ``dirty_rows=<int>`` (rows with any of them).

    .venv/bin/python -m benchmarks.data_hygiene out/run=local
"""

from __future__ import annotations

import argparse

from pipeline.report.hygiene import hygiene_of_run
from pipeline.store.run_folder import RunFolder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run folder: <output_root>/run=<id> (path or URI)")
    parser.add_argument("--grade-timeout-s", type=float, default=5.0)
    args = parser.parse_args()
    run = RunFolder.at(args.run_dir)
    report = hygiene_of_run(run, timeout_s=args.grade_timeout_s)
    print(f"run: {run.location}")
    print(report.markdown())
    print(f"dirty_rows={report.dirty_rows}")


if __name__ == "__main__":
    main()
