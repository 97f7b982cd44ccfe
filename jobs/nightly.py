"""Nightly synthesis: the next unprocessed slice of the source, dated output, publish.

    python -m jobs.nightly --config configs/nightly.yaml [--date 2026-11-22] [--dry-run]

Run it from cron or a KubeRay RayCronJob (see jobs/cron.example and
jobs/raycronjob.yaml).  Each date gets its own slice of `nightly.problems_per_night`
problems and writes `run=<prefix><date>/`; rerunning a date resumes it.  A night whose
search finished but whose publish failed is, when rerun, only published: no engine starts
and nothing is searched again.  `--dry-run` plans the night's slice as a run would take
it now (the synth dry run of that slice: problems, tokens, what the nodes need) and
writes nothing, the ledger included.

With `max_wall_s` in the config the night is capped in wall time from the job's start: at
the cap no new tree starts, trees in flight get `wall_grace_s` to finish (later ones are
abandoned, uncommitted), and the night publishes what it committed, records itself
"failed" with reason "wall time" and the number of problems it left, prints that number
and the command that resumes them, and exits 124.  Rerunning the date searches exactly
the problems left: the slice stays as it was and committed trees are skipped.

Exit status (`jobs.exits`): 0 all searched and published (if configured), 1 any failure
(problem errors, a publish failure, or a crash), 2 bad config or arguments, 124 stopped
at the wall-time cap (rerun the date to finish it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import sys
from typing import TYPE_CHECKING, Any

from jobs.exits import (
    FAILED,
    OK,
    WALL_TIME,
    add_run_options,
    guarded_publishing,
    run_alone,
    run_config,
)

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
    from pipeline.run.nightly import night_config, plan_night, run_night, run_spent
    from pipeline.run.synthesis import synthesize
    from pipeline.run.wall import WallCap
    from pipeline.store.filesystem import check_reachable, open_store

    config = run_config(args)
    # the cap counts from the job's start, and spans every invocation of a topped-up night
    wall_cap = WallCap.start(config)
    try:
        date = dt.date.fromisoformat(args.date) if args.date else dt.datetime.now(dt.UTC).date()
    except ValueError:
        raise InputError(f"--date {args.date}: not a YYYY-MM-DD date") from None
    # the ledger lives under the output root: a bucket that is missing or refuses the
    # credentials is one line before anything is read
    check_reachable(open_store(config.output_root), config.output_root)
    if args.dry_run:
        return _dry_run(args, config, date)
    ledger, night = plan_night(config, date)
    # as read before the night was claimed again (claiming marks it running)
    if _publish_pending(config, ledger.reading.find(night.date)):
        return _publish_only(config, ledger, night)
    _warn_unfinished(args, ledger, night)
    print(f"night {night.date}: {night.describe()}")
    tonight = night_config(config, night)
    cut = False  # stopped at the wall-time cap
    try:
        search = functools.partial(synthesize, wall_cap=wall_cap)
        summary, night = run_night(config, ledger, night, search)
        tonight = night_config(config, night)  # the slice as admitted (spend cap)
        summary.render()
        if summary.problems == 0:
            print("source exhausted: no problems left for this slice; nothing to do")
        cut = summary.stopped > 0
        if cut:  # before publishing: a refused push must not hide how the night ended
            _say_cut(args, config, night, summary.stopped + summary.search_failures)
        if config.publish.repo is not None:
            if summary.rows.get("sft", 0) + summary.rows.get("dpo", 0):
                published = publish_configured(tonight, summary.run_dir)
                print(published.summary())
            else:
                print("no sft or dpo rows in this night's run: nothing to publish")
    except HubPublishError:
        # A night cut at its wall-time cap stays one to search: its rerun searches the rest
        # and publishes the whole run (a "publish" night's rerun would only publish).
        ledger.mark(night.date, "failed", reason="wall time" if cut else "publish")
        raise
    except Exception:  # the night stays unfinished; `guarded` prints the one line
        ledger.mark(night.date, "failed", reason="crash")
        raise
    if cut:
        # Failed, not done: the rerun of the date resumes the same slice, and later nights
        # warn about it until then.
        ledger.mark(
            night.date,
            "failed",
            reason="wall time",
            max_wall_s=config.max_wall_s,
            left=summary.stopped + summary.search_failures,
            searched=summary.searched,
            errors=summary.errors,
            spent=run_spent(config, night.run_id),
        )
        return WALL_TIME
    if summary.search_failures:
        # Failed searches (an engine outage, the circuit breaker) are retried by rerunning
        # the date: the night stays unfinished, and its slice unspent.
        ledger.mark(night.date, "failed", reason="search errors", errors=summary.errors)
        return FAILED
    # Source errors are final (bad rows stay bad), so the night is done either way;
    # the exit status still tells the scheduler that some rows failed.
    spent = run_spent(config, night.run_id)
    ledger.mark(
        night.date,
        "done",
        reason=None,  # an earlier attempt's, now resolved
        left=0,
        searched=summary.searched,
        errors=summary.errors,
        spent=spent,
    )
    return FAILED if summary.errors else OK


def _resume_command(args: argparse.Namespace, date: str) -> str:
    """The command that resumes night `date`: this job's, with its output root."""
    root = f" --output-root {args.output_root}" if args.output_root else ""
    return f"python -m jobs.nightly --config {args.config}{root} --date {date}"


def _say_cut(args: argparse.Namespace, config: RunConfig, night: NightSlice, left: int) -> None:
    """The line of a night stopped at its wall-time cap: what it left, and how to resume."""
    print(
        f"stopped: the wall-time cap (max_wall_s {config.max_wall_s:g} s) was reached; "
        f"{left} problems of night {night.date}'s slice were left unsearched (committed trees "
        f"are kept and published); resume them with {_resume_command(args, night.date)}",
        file=sys.stderr,
    )


def _warn_unfinished(args: argparse.Namespace, ledger: Ledger, night: NightSlice) -> None:
    """Name the earlier nights that never finished, each with the command that resumes it."""
    for old in ledger.unfinished(before=night.date):
        why = f" ({old['reason']})" if old.get("reason") else ""
        print(
            f"warning: night {old['date']} is {old.get('status')}{why}; resume it with "
            f"{_resume_command(args, old['date'])}",
            file=sys.stderr,
        )


def _dry_run(args: argparse.Namespace, config: RunConfig, date: dt.date) -> int:
    from pipeline.run.nightly import night_config, plan_night
    from pipeline.run.plan import plan_run, render_plan

    # the same reading of the ledger as a run's (`read_ledger`), written nowhere
    ledger, night = plan_night(config, date, dry_run=True)
    known = ledger.find(night.date)
    how = f"recorded, {known.get('status')}" if known else "new: the slice after the last one"
    print(f"night {night.date}: {night.describe()} ({how})")
    if _publish_pending(config, known):
        print("its search is done and its publish failed: a run would publish it only")
    _warn_unfinished(args, ledger, night)
    render_plan(plan_run(night_config(config, night)))
    return OK


def _publish_pending(config: RunConfig, night: dict[str, Any] | None) -> bool:
    """The night's search finished and only its publish failed (and its run is there to
    publish: a night whose run folder is gone is searched again)."""
    from pipeline.store.run_folder import RunFolder

    if not (night and night.get("status") == "failed" and night.get("reason") == "publish"):
        return False
    return RunFolder.open(config.output_root, night["run_id"]).store.is_dir()


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
    print(published.summary())
    ledger.mark(night.date, "done", reason=None, spent=run_spent(config, night.run_id))
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
