"""Exit statuses and one-line errors, shared by every job entrypoint.

    0  everything done (and published, if configured)
    1  some problems failed (see errors/), publishing failed, or an unexpected error
    2  bad config, source, run id or output location (`pipeline.errors.InputError`),
       the run folder is in use by another process, or another writer took its lease
       over while this one stalled (`pipeline.store.lease.LeaseLost`)
  124  stopped at its wall-time cap (`max_wall_s`): what was searched is committed,
       reported and published (if configured), the rest is not; rerun the same command
       (the same `--date` for a night) to search the rest.  124 is what `timeout(1)`
       exits with: a job it killed and a job that stopped itself read the same, "ran
       out of time, rerun to resume".  Any non-zero status is a failure to KubeRay,
       so a RayJob's `backoffLimit` retries the job (the retry resumes, under a fresh cap)
  130  interrupted (Ctrl-C, SIGINT): rerun the same command to resume.  A SIGINT at any
       moment of the command gives 130, even when the KeyboardInterrupt it raised was
       caught and dropped on the way (`pipeline.run.interrupt`)

An error is one line on stderr naming the thing to fix; the traceback is shown
only with `--verbose` (never by default: cron mail and `ray job logs` stay readable).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.config import RunConfig

OK, FAILED, BAD_INPUT, WALL_TIME, INTERRUPTED = 0, 1, 2, 124, 130


def run_alone(
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None,
) -> int:
    """A job run as its own command (`python -m jobs.<name>`), not as a `bgmcts`
    subcommand: its options on a parser that the first line of its docstring (`doc`)
    describes, then `run` on `argv` parsed."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print tracebacks of errors; show Ray's own progress bars and INFO logs",
    )


def add_run_options(parser: argparse.ArgumentParser, *, config: str, dry_run: str) -> None:
    """The options of a job that runs a synthesis config: --config (default `config`),
    --output-root, --dry-run (`dry_run` says what it does) and --verbose."""
    parser.add_argument("--config", default=config, help="YAML run config")
    parser.add_argument("--output-root", help="overrides output_root of the config")
    parser.add_argument("--dry-run", action="store_true", help=dry_run)
    add_verbose(parser)


def add_run_folder(parser: argparse.ArgumentParser) -> None:
    """The one run folder a job reads, as its positional `run_dir`."""
    # A string, not a Path: Path("s3://b/x") would fold the "//" of a bucket URI.
    parser.add_argument("run_dir", help="a run folder: out/run=<id> or s3://bucket/prefix/run=<id>")


def run_config(args: argparse.Namespace, **overrides: Any) -> RunConfig:
    """The run config that the options of `add_run_options` name: --config, with
    --output-root (when given) and `overrides` over its own values."""
    from pipeline.config import load_run_config

    return load_run_config(args.config, output_root=args.output_root, **overrides)


def guarded_publishing(job: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """`guarded` `job(args)` for a job that publishes to the Hub (--verbose from `args`): a
    push the Hub refused exits 1 with its own message (the local Parquet stays; the
    message says how to retry)."""
    from pipeline.publish.hub import HubPublishError

    return guarded(lambda: job(args), verbose=args.verbose, failures=(HubPublishError,))


def guarded_run_folder(
    job: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    *,
    bad_input: tuple[type[BaseException], ...] = (),
    failures: tuple[type[BaseException], ...] = (),
) -> int:
    """`guarded` `job(args)` for a job that reads run folders (--verbose from `args`): a
    folder that is not there, or a bucket that denies access, is an argument to fix (exit
    2), as are the `bad_input` types; `failures` as `guarded`'s."""
    return guarded(
        lambda: job(args),
        verbose=args.verbose,
        bad_input=(FileNotFoundError, PermissionError, *bad_input),
        failures=failures,
    )


def guarded(
    action: Callable[[], int],
    *,
    verbose: bool,
    bad_input: tuple[type[BaseException], ...] = (),
    failures: tuple[type[BaseException], ...] = (),
) -> int:
    """Run `action`; turn an exception into one line and the documented exit status.

    `InputError` and the `bad_input` types exit 2, the `failures` types (a Hub that
    refused a push) exit 1, each with its own message; anything else exits 1 naming its
    type.  A SIGINT exits 130, even when its KeyboardInterrupt was caught and dropped
    on the way (`pipeline.run.interrupt`), and so does an error after one.  Every message
    and traceback goes through `redact_text`, and so does every log line and warning of
    the process (`install_log_redaction`).
    """
    from common.redact import install_log_redaction, redact_text
    from pipeline.errors import InputError
    from pipeline.run.interrupt import honoured, interrupted

    install_log_redaction()
    fix_input: tuple[type[BaseException], ...] = (InputError, *bad_input)
    try:
        with honoured():
            try:
                status = action()
            except Exception:
                if not interrupted():
                    raise
                # what a dropped KeyboardInterrupt broke (a lock it left released, a
                # queue it left empty) fails later: the cause, and the status, is the
                # interrupt
                _traceback(verbose)
                raise KeyboardInterrupt from None
            # a SIGINT whose KeyboardInterrupt something caught and dropped on the way
            # still ends the command as interrupted, not as done
            if interrupted():
                raise KeyboardInterrupt
        return status
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return INTERRUPTED
    except fix_input as exc:
        _traceback(verbose)
        print(f"error: {redact_text(exc)}", file=sys.stderr)
        return BAD_INPUT
    except failures as exc:
        _traceback(verbose)
        print(f"error: {redact_text(exc)}", file=sys.stderr)
        return FAILED
    except Exception as exc:
        _traceback(verbose)
        hint = "" if verbose else " (run with --verbose for the traceback)"
        message = redact_text(exc).splitlines()[0] if str(exc) else ""
        print(f"error: {type(exc).__name__}: {message}{hint}", file=sys.stderr)
        return FAILED


def _traceback(verbose: bool) -> None:
    """The traceback of the exception being handled, redacted, with --verbose."""
    from common.redact import redact_text

    if verbose:
        print(redact_text(traceback.format_exc()), end="", file=sys.stderr)


__all__ = [
    "BAD_INPUT",
    "FAILED",
    "INTERRUPTED",
    "OK",
    "WALL_TIME",
    "add_run_folder",
    "add_run_options",
    "add_verbose",
    "guarded",
    "guarded_publishing",
    "guarded_run_folder",
    "run_alone",
    "run_config",
]
