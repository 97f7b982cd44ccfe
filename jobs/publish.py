"""Publish a finished run's Parquet (every record type) to the Hub, on its own.

    python -m jobs.publish --run-dir out/run=2026-11-22 --repo org/name [--run-id ID]

This is also the retry command a failed publish prints.  The token is read from
the environment variable named by --token-env (HF_TOKEN by default), never from
the command line.  Exit status: 0 published, 1 the Hub refused or failed (the
local files are untouched), 2 bad arguments or not a run folder.
"""

from __future__ import annotations

import argparse

from jobs.exits import OK, add_verbose, guarded, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # A string, not a Path: Path("s3://b/x") would fold the "//" of a bucket URI.
    parser.add_argument(
        "--run-dir", required=True, help="the .../run=<id> folder or s3://bucket/prefix/run=<id>"
    )
    parser.add_argument("--repo", required=True, help="Hub dataset repo id, <namespace>/<name>")
    parser.add_argument("--run-id", help="run id on the Hub (default: from the folder name)")
    parser.add_argument("--token-env", default="HF_TOKEN", help="env var holding the token")
    parser.add_argument("--public", action="store_true", help="create the repo public")
    parser.add_argument("--endpoint", help="Hub endpoint (default: huggingface.co)")
    parser.add_argument(
        "--license",
        help="the dataset's license for the card (default: the run config's publish.license); "
        "a public repo needs one",
    )
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    from pipeline.publish.hub import HubPublishError

    return guarded(
        lambda: _publish(args),
        verbose=args.verbose,
        # a missing folder, a bad run id, a bucket that denies access: fix and rerun
        bad_input=(FileNotFoundError, ValueError, PermissionError),
        failures=(HubPublishError,),
    )


def _publish(args: argparse.Namespace) -> int:
    from pipeline.publish.publish_run import publish_run_dir

    result = publish_run_dir(
        args.run_dir,
        args.repo,
        run_id=args.run_id,
        token_env=args.token_env,
        private=not args.public,
        endpoint=args.endpoint,
        license=args.license,
    )
    counts = ", ".join(f"{k} {v} rows" for k, v in result.counts.items())
    print(f"published run {result.run_id} to {result.repo_id} ({counts}): {result.commit_url}")
    print(
        f"{result.commits} commits, {len(result.uploaded)} files uploaded, "
        f"{len(result.skipped)} already there, {len(result.deleted)} deleted"
    )
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
