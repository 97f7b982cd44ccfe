"""Check every training row of a run as a trainer would read it.

    bgmcts check out/run=local
    python -m jobs.check s3://bucket/prefix/run=2026-11-26

Reads the run's committed tables, every part of every record type against its declared
schema first (a column of the wrong type, a null where the schema says never, a column
stored otherwise than in the sibling parts), then checks each row of sft, dpo, step_dpo,
kto and prm (`pipeline.report.hygiene`): text after the answer statement, more than one
answer statement, no answer statement, truncated by the token cap, more than one prompt
for a problem, a rejected or undesirable text that states the reference, prm steps that
do not rebuild their trajectory, kto labels against grading.  Prints the run, a table of
the counts per table, a line per schema problem naming the table, the part and the
column and, last, ``dirty_rows=<int>`` (rows with any of them).

Exit status: 0 every committed row was read and is clean; 1 some row is dirty or some
part does not hold its declared schema (so a nightly job or CI step that runs the check
fails on it), or an unexpected error; 2 with one line when the argument is no run folder
or the run cannot be read whole (missing, access denied, a part that is no readable
Parquet, a part its commit markers name that is not there, a part without a column the
checks read), naming the table and the part or column.  What a run is expected to hold
is what its markers say it committed, so a run with no rows of a table (no dpo pairs,
say) has nothing missing.
"""

from __future__ import annotations

import argparse

from jobs.exits import FAILED, OK, add_run_folder, add_verbose, guarded_run_folder, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_folder(parser)
    parser.add_argument(
        "--grade-timeout-s",
        type=float,
        default=5.0,
        help="seconds math-verify may take per comparison (a rejected text against the reference)",
    )
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    # a Parquet part pyarrow cannot read (`UnreadablePart` is an InputError): the run
    # cannot be checked, fix the argument
    return guarded_run_folder(_check, args, bad_input=(ValueError,))


def _check(args: argparse.Namespace) -> int:
    from pipeline.report.hygiene import hygiene_of_run
    from pipeline.store.run_folder import RunFolder

    run_folder = RunFolder.at(args.run_dir)
    report = hygiene_of_run(run_folder, timeout_s=args.grade_timeout_s)
    print(f"run: {run_folder.location}")
    print(report.markdown())
    print(f"dirty_rows={report.dirty_rows}")
    # a part of the wrong schema with no rows still breaks a trainer's load of the table
    return OK if report.dirty_rows == 0 and not report.problems else FAILED


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
