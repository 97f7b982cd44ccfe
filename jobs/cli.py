"""`bgmcts`: the command line for local use.

    bgmcts synth    --config configs/local.yaml      search, write Parquet (and publish)
    bgmcts publish  --run-dir out/run=local --repo org/name
    bgmcts report   out/run=local                    totals of a run folder, from its Parquet
    bgmcts nightly  --config configs/nightly.yaml    the next slice of the source, dated output
    bgmcts evaluate --config configs/eval-sim.yaml   methods x budgets x seeds -> report folder

Each subcommand is also a module (`python -m jobs.synthesize` ...), which is what
`ray job submit` runs on a cluster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs import evaluate, nightly, publish, synthesize


def _report(args: argparse.Namespace) -> int:
    path: Path = args.folder
    if (path / "eval_trees.parquet").is_file():
        return evaluate.report_folder(path)
    from pipeline.publishing import read_manifest
    from pipeline.run_report import prices_from_config, write_run_report
    from pipeline.summary import summarize_run_dir

    try:
        summarize_run_dir(path).render()
        config = read_manifest(path).get("config") or {}
        written = write_run_report(path, prices_from_config(config))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {written[-2]} ({len(written) - 2} images)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bgmcts", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module, help_ in (
        ("synth", synthesize, "run the synthesis job"),
        ("publish", publish, "push a run's records (every type a config) to the Hub"),
        ("nightly", nightly, "nightly slice of the source"),
        ("evaluate", evaluate, "methods x budgets x seeds, with a report"),
    ):
        sub = commands.add_parser(name, help=help_, description=module.__doc__)
        module.build_parser(sub)
        sub.set_defaults(handler=module.run)
    report = commands.add_parser("report", help="summarize a run or evaluation folder")
    report.add_argument("folder", type=Path, help="out/run=<id> or an evaluation folder")
    report.set_defaults(handler=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
