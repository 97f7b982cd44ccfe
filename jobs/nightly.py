"""Nightly synthesis: the next unprocessed slice of the source, dated output, publish.

    python -m jobs.nightly --config configs/nightly.yaml [--date 2026-11-22] [--dry-run]

Run it from cron or a KubeRay RayCronJob (see jobs/cron.example and
jobs/raycronjob.yaml).  Each date gets its own slice of `nightly.problems_per_night`
problems and writes `run=<prefix><date>/`; rerunning a date resumes it.  A night whose
search finished but whose publish failed is, when rerun, only published: no engine starts
and nothing is searched again.  `--dry-run` plans the night's slice as a run would take
it now (the synth dry run of that slice: problems, tokens, what the nodes need) and
writes nothing, the ledger included.
Exit status: 0 all searched and published (if configured), 1 any failure
(problem errors, a publish failure, or a crash), 2 bad config or arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TYPE_CHECKING, Any

from jobs.exits import FAILED, OK, add_run_options, guarded_publishing, run_alone, run_config

if TYPE_CHECKING:
    from pipeline.config import RunConfig
    from pipeline.run.nightly import Ledger, NightSlice


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_options(
        parser,
        config="configs/nightly.yaml",
        dry_run="plan the night's slice and print it; start nothing, write nothing",
    )
    parser.add_argument("--date", help="YYYY-MM-DD (default: today, UTC); reruns resume")


def run(args: argparse.Namespace) -> int:
    return guarded_publishing(_night, args)


def _night(args: argparse.Namespace) -> int:
    from pipeline.errors import InputError
    from pipeline.publish.hub import HubPublishError
    from pipeline.publish.publish_run import publish_configured
    from pipeline.run.nightly import Ledger, night_config, plan_night, run_night, run_spent
    from pipeline.run.synthesis import synthesize
    from pipeline.store.filesystem import check_reachable, open_store

    config = run_config(args)
    try:
        date = dt.date.fromisoformat(args.date) if args.date else dt.datetime.now(dt.UTC).date()
    except ValueError:
        raise InputError(f"--date {args.date}: not a YYYY-MM-DD date") from None
    # the ledger lives under the output root: a bucket that is missing or refuses the
    # credentials is one line before anything is read
    check_reachable(open_store(config.output_root), config.output_root)
    if args.dry_run:
        return _dry_run(config, date)
    # read before the night is claimed again (claiming marks it running)
    publish_only = _publish_pending(Ledger(config.output_root, read_only=True).find(str(date)))
    ledger, night = plan_night(config, date)
    if publish_only:
        return _publish_only(config, ledger, night)
    for old in ledger.unfinished(before=night.date):
        print(
            f"warning: night {old['date']} is {old.get('status')}; resume it with "
            f"python -m jobs.nightly --config {args.config} --date {old['date']}",
            file=sys.stderr,
        )
    print(f"night {night.date}: problems {night.skip}..{night.skip + night.limit - 1}")
    tonight = night_config(config, night)
    try:
        summary, night = run_night(config, ledger, night, synthesize)
        tonight = night_config(config, night)  # the slice as admitted (spend cap)
        summary.render()
        if summary.problems == 0:
            print("source exhausted: no problems left for this slice; nothing to do")
        if config.publish.repo is not None:
            if summary.rows.get("sft", 0) + summary.rows.get("dpo", 0):
                published = publish_configured(tonight, summary.run_dir)
                print(f"published to {published.repo_id}: {published.commit_url}")
            else:
                print("no sft or dpo rows in this night's run: nothing to publish")
    except HubPublishError:
        ledger.mark(night.date, "failed", reason="publish")
        raise
    except Exception:  # the night stays unfinished; `guarded` prints the one line
        ledger.mark(night.date, "failed", reason="crash")
        raise
    if summary.search_failures:
        # Failed searches (an engine outage, the circuit breaker) are retried by rerunning
        # the date: the night stays unfinished, and its slice unspent.
        ledger.mark(night.date, "failed", reason="search errors", errors=summary.errors)
        return FAILED
    # Source errors are final (bad rows stay bad), so the night is done either way;
    # the exit status still tells the scheduler that some rows failed.
    spent = run_spent(config, night.run_id)
    ledger.mark(night.date, "done", searched=summary.searched, errors=summary.errors, spent=spent)
    return FAILED if summary.errors else OK


def _dry_run(config: RunConfig, date: dt.date) -> int:
    from pipeline.run.nightly import night_config, plan_night
    from pipeline.run.plan import plan_run, render_plan

    ledger, night = plan_night(config, date, dry_run=True)
    known = ledger.find(night.date)
    how = f"recorded, {known.get('status')}" if known else "new: the slice after the last one"
    print(f"night {night.date}: problems {night.skip}..{night.skip + night.limit - 1} ({how})")
    if _publish_pending(known):
        print("its search is done and its publish failed: a run would publish it only")
    render_plan(plan_run(night_config(config, night)))
    return OK


def _publish_pending(night: dict[str, Any] | None) -> bool:
    """The night's search finished and only its publish failed."""
    return bool(night and night.get("status") == "failed" and night.get("reason") == "publish")


def _publish_only(config: RunConfig, ledger: Ledger, night: NightSlice) -> int:
    """Publish a night whose search is done: no Ray, no engine, nothing searched again."""
    from pipeline.publish.hub import HubPublishError
    from pipeline.publish.publish_run import publish_configured
    from pipeline.run.nightly import night_config, run_spent
    from pipeline.store.run_folder import RunFolder

    tonight = night_config(config, night)
    run_dir = RunFolder.open(config.output_root, night.run_id).location
    print(f"night {night.date}: searched already; publishing {run_dir} only")
    try:
        published = publish_configured(tonight, run_dir)
    except HubPublishError:
        ledger.mark(night.date, "failed", reason="publish")
        raise
    print(f"published to {published.repo_id}: {published.commit_url}")
    ledger.mark(night.date, "done", reason=None, spent=run_spent(config, night.run_id))
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
