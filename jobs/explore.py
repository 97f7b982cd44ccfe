"""Write a run's tree explorer: one self-contained HTML page to walk its trees in a browser.

    bgmcts explore out/run=local                    -> out/run=local/explorer.html
    bgmcts explore s3://bucket/prefix/run=x --output x.html

The page (`pipeline.report.explorer`) lists the run's problems with their outcome
(solved, mixed, none correct) and rows per training table, with a search box and
filters by outcome and by table; a problem opens as its tree, node by node: each step's
text, Q and N, the scorer's judgement, answered and correct, the rows the node became
and the candidate rows a gate kept out, with the gate.  It fetches nothing (no server,
no network): open the file in a browser, from a disk, a bucket or the Hub.
`bgmcts report` writes the same page beside report.md.

Exit status: 0 written; 2 with one line when the argument is no run folder or the run
cannot be read (a part that is no readable Parquet, a run.json whose config cannot be
read), naming the file; 1 an unexpected error.
"""

from __future__ import annotations

import argparse

from jobs.exits import OK, add_run_folder, add_verbose, guarded_run_folder, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_folder(parser)
    parser.add_argument(
        "--output", default=None, help="the HTML file to write (default: explorer.html in the run)"
    )
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    # a Parquet part pyarrow cannot read (`UnreadablePart`), tree_nodes rows that make no
    # tree: fix the argument
    return guarded_run_folder(_explore, args, bad_input=(ValueError,))


def _explore(args: argparse.Namespace) -> int:
    from pipeline.report.explorer import write_explorer

    where, size = write_explorer(args.run_dir, args.output)
    print(f"explorer: {where} ({size / 1e6:.2f} MB); open it in a browser")
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
