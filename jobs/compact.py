"""Compact a run folder: its per-batch Parquet parts merged into a few shards per record type.

    python -m jobs.compact --run-dir out/run=2026-11-22
    bgmcts compact --run-dir s3://bucket/prefix/run=2026-11-22

A run compacts itself when its last tree is committed (`compact` in the run config,
on by default); this command compacts one that did not (compact: false, a run stopped
before its end, a run resumed since) and finishes a compaction that was stopped midway.
It takes the run's writer lease, so it waits for no one: a folder in use by a live run
is refused.  Every reader counts the same rows before and after
(`pipeline.store.compaction`).  Prints one line: batches into shards, files before and
after, rows per record type.  Exit status: 0 compacted (or nothing to compact), 2 no run
folder or one in use, 1 anything else (the folder then reads as before; rerun).
"""

from __future__ import annotations

import argparse

from jobs.exits import OK, add_verbose, guarded_run_folder, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # A string, not a Path: Path("s3://b/x") would fold the "//" of a bucket URI.
    parser.add_argument(
        "--run-dir", required=True, help="the .../run=<id> folder or s3://bucket/prefix/run=<id>"
    )
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    return guarded_run_folder(_compact, args)


def _compact(args: argparse.Namespace) -> int:
    from pipeline.store.compaction import compact_run
    from pipeline.store.run_folder import RunFolder

    print(compact_run(RunFolder.at(args.run_dir)).line())
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
