"""`bgmcts`: the command line for local use.

    bgmcts synth    --config configs/local.yaml      search, write Parquet (and publish)
    bgmcts publish  --run-dir out/run=local --repo org/name
    bgmcts report   out/run=local                    totals of a run folder, from its Parquet
    bgmcts check    out/run=local                    every training row checked as a trainer
                                                     reads it; last line dirty_rows=<int>
    bgmcts explore  out/run=local                    the run's trees as one HTML page to open
                                                     in a browser (explorer.html)
    bgmcts compact  --run-dir out/run=local          a run's parts merged into a few shards
                                                     per record type (runs do it themselves)
    bgmcts nightly  --config configs/nightly.yaml    the next slice of the source, dated output
    bgmcts evaluate --config configs/eval-sim.yaml   methods x budgets x seeds -> report folder
    bgmcts train-prm out/run=local --output DIR      a one-pass PRM checkpoint from the run's
                                                     prm rows (needs the prm extra)
    bgmcts export-gguf CHECKPOINT --like embedded --output FILE.gguf
                                                     a fine-tuned llama checkpoint as a GGUF
                                                     the llama.cpp engine serves
    bgmcts embedded-model                            the embedded SmolLM2 as a model folder
                                                     for vLLM (once; its path printed)
    bgmcts prefetch-models configs/nightly.yaml      the configs' Hub models and datasets
                                                     into the cache (HF_HOME), ahead of a run

Each subcommand is also a module (`python -m jobs.synthesize` ...), which is what
`ray job submit` runs on a cluster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs import (
    check,
    compact,
    embedded_model,
    evaluate,
    explore,
    export_gguf,
    nightly,
    prefetch_models,
    publish,
    synthesize,
    train_prm,
)
from jobs.exits import OK, add_verbose, guarded_run_folder


def _report(args: argparse.Namespace) -> int:
    return guarded_run_folder(_write_report, args)


def _write_report(args: argparse.Namespace) -> int:
    from pipeline.store.filesystem import is_remote

    remote = is_remote(args.folder)
    path = Path(args.folder)
    if not remote and (path / "eval_trees.parquet").is_file():
        return evaluate.report_folder(path)
    from pipeline.report.explorer import EXPLORER_HTML
    from pipeline.report.run_report import REPORT_FILES
    from pipeline.run.summary import refresh_run_report
    from pipeline.store.run_folder import local_run_dir

    # A bucket's run (s3://.../run=<id>) is read through a local copy of its committed
    # parts; the report files are written back next to them.
    with local_run_dir(args.folder, write_back=(*REPORT_FILES, EXPLORER_HTML)) as local:
        summary, _, written = refresh_run_report(local)
        if remote:
            summary.run_dir = args.folder
        summary.render()
        explorer = _write_explorer(local)
    where = f"{args.folder.rstrip('/')}/{written[-2].name}" if remote else written[-2]
    print(f"report: {where} ({len(written) - 2} images)")
    if explorer is not None:
        print(f"explorer: {args.folder.rstrip('/')}/{explorer} (open it in a browser)")
    return OK


def _write_explorer(run_dir: Path) -> str | None:
    """The tree explorer beside the report (`bgmcts explore`); its file name, or None with
    one line on stderr when the run's trees cannot be drawn (the report stands alone)."""
    from pipeline.errors import InputError
    from pipeline.report.explorer import EXPLORER_HTML, write_explorer

    try:
        write_explorer(run_dir)
    except InputError as exc:
        print(f"warning: explorer.html not written: {exc}", file=sys.stderr)
        return None
    return EXPLORER_HTML


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bgmcts", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module, help_ in (
        ("synth", synthesize, "run the synthesis job"),
        ("publish", publish, "push a run's records (every type a config) to the Hub"),
        ("nightly", nightly, "nightly slice of the source"),
        ("evaluate", evaluate, "methods x budgets x seeds, with a report"),
        ("check", check, "check a run's training rows as a trainer reads them (exit 1: dirty)"),
        ("explore", explore, "a run's trees as one self-contained HTML page (explorer.html)"),
        ("compact", compact, "merge a run folder's parts into a few shards per record type"),
        ("train-prm", train_prm, "train a one-pass PRM checkpoint on runs' prm rows"),
        ("export-gguf", export_gguf, "a fine-tuned llama checkpoint as a GGUF for llama.cpp"),
        ("embedded-model", embedded_model, "the embedded SmolLM2 as a model folder for vLLM"),
        ("prefetch-models", prefetch_models, "the configs' Hub models into the cache, ahead"),
    ):
        sub = commands.add_parser(name, help=help_, description=module.__doc__)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    report = commands.add_parser("report", help="summarize a run or evaluation folder")
    report.add_argument(
        "folder", help="out/run=<id>, s3://bucket/prefix/run=<id> or an evaluation folder"
    )
    add_verbose(report)
    report.set_defaults(handler=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
