"""Synthesis job: `python -m jobs.synthesize --config configs/local.yaml`.

Also the entrypoint of `ray job submit --working-dir . -- python -m jobs.synthesize
--config configs/... --output-root s3://...`: on a cluster it joins the cluster from
RAY_ADDRESS; a relative output root is refused there (`check_submitted_output_root`).
Exit status (`jobs.exits`): 0 when every problem was searched (and published, if
configured), 1 when some problems failed (their errors are in errors/; failed
searches are retried by the next run) or publishing failed (the local Parquet
stays; the message says how to retry), 2 for a bad config, source, run id or
output location (a relative one under `ray job submit`), an empty selection, a run
folder in use, or a lease taken over by another writer while this run stalled: one line,
no traceback unless --verbose; 124 when the run stopped at its wall-time cap
(`max_wall_s`): what it searched is committed, reported and published, and rerunning the
same command searches the rest.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.config import RunConfig

from jobs.exits import (
    FAILED,
    OK,
    WALL_TIME,
    add_run_options,
    guarded_publishing,
    run_alone,
    run_config,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_options(
        parser,
        config="configs/local.yaml",
        dry_run="validate the config and source, print the plan, start nothing",
    )
    parser.add_argument("--run-id", help="overrides run_id (rerun the same id to resume)")


def run(args: argparse.Namespace) -> int:
    return guarded_publishing(_run, args)


def _run(args: argparse.Namespace) -> int:
    config = run_config(args, run_id=args.run_id)
    if args.dry_run:
        return dry_run(config)
    from pipeline.publish.publish_run import publish_configured
    from pipeline.run.synthesis import synthesize

    summary = synthesize(config, verbose=args.verbose)
    summary.render()
    if summary.not_started:
        print(
            f"error: circuit breaker: the engine failed repeatedly; {summary.not_started} "
            "problems were not started (rerun the same command to retry them)",
            file=sys.stderr,
        )
    if summary.stopped:
        print(
            f"stopped: the wall-time cap (max_wall_s {config.max_wall_s:g} s) was reached; "
            f"{summary.stopped} problems were left unsearched (committed trees are kept); "
            "rerun the same command to search them",
            file=sys.stderr,
        )
    if config.publish.repo is not None:
        published = publish_configured(config, summary.run_dir)
        print(published.summary())
    if summary.stopped:
        return WALL_TIME
    return FAILED if summary.errors else OK


def dry_run(config: RunConfig) -> int:
    from pipeline.run.plan import plan_run, render_plan

    # A source error or a missing model file is an InputError (exit 2); engine packages
    # missing here are listed as what the cluster's nodes need, not refused.
    if "nightly" in config.model_fields_set:
        print(
            "note: this config has a `nightly:` section; this plans the whole selection, "
            "`bgmcts nightly --dry-run` plans one night's slice"
        )
    render_plan(plan_run(config))
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
