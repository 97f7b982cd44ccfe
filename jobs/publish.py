"""Publish a finished run's Parquet (every record type) to the Hub, on its own.

    python -m jobs.publish --run-dir out/run=2026-11-22 --repo org/name [--run-id ID]
    python -m jobs.publish --reshard --repo org/name [--run-id ID]

This is also the retry command a failed publish prints.  ``--reshard`` needs no run
folder: it rewrites the repo's runs published in an earlier layout (one file per
Parquet part) as shards from the repo itself, then the card's ``configs:``
(`pipeline.publish.reshard`); ``--run-id`` limits it to that run.  Run again after an
interruption, it finishes; on a repo already in the shard layout it does nothing.
The token is read from the environment variable named by --token-env (HF_TOKEN by
default), never from the command line.  Exit status: 0 published (resharded), 1 the
Hub refused or failed (the local files are untouched) or a run was left as it was,
2 bad arguments or not a run folder.
"""

from __future__ import annotations

import argparse

from jobs.exits import FAILED, OK, add_verbose, guarded_run_folder, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # A string, not a Path: Path("s3://b/x") would fold the "//" of a bucket URI.
    parser.add_argument("--run-dir", help="the .../run=<id> folder or s3://bucket/prefix/run=<id>")
    parser.add_argument("--repo", required=True, help="Hub dataset repo id, <namespace>/<name>")
    parser.add_argument(
        "--reshard",
        action="store_true",
        help="rewrite the repo's runs of earlier layouts as shards, from the Hub (no --run-dir)",
    )
    parser.add_argument(
        "--run-id",
        help="run id on the Hub (default: from the folder name); with --reshard: only that run",
    )
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

    return guarded_run_folder(
        _reshard if args.reshard else _publish,
        args,
        bad_input=(ValueError,),  # a bad run id: fix and rerun
        failures=(HubPublishError,),
    )


def _publish(args: argparse.Namespace) -> int:
    from pipeline.publish.publish_run import publish_run_dir

    if args.run_dir is None:
        raise ValueError("--run-dir is required (or --reshard, to reshard the repo itself)")
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
    print(f"run {result.run_id}: {counts}")
    print(result.summary())
    return OK


def _reshard(args: argparse.Namespace) -> int:
    import os

    from huggingface_hub import HfApi

    from pipeline.publish.reshard import reshard_repo

    # a reshard reads the runs from the repo and changes no card facts: these would be ignored
    given = [
        flag
        for flag, value in (
            ("--run-dir", args.run_dir),
            ("--public", args.public),
            ("--license", args.license),
        )
        if value
    ]
    if given:
        raise ValueError(
            f"--reshard takes no {', '.join(given)}: it rewrites the runs already in --repo"
        )
    if args.repo.count("/") != 1:
        raise ValueError(f"Invalid repo id {args.repo!r}: expected '<namespace>/<name>'.")
    token = os.environ.get(args.token_env, "").strip()
    if not token:
        raise ValueError(
            f"No Hugging Face token: set the environment variable {args.token_env} "
            "to a token with write access."
        )
    result = reshard_repo(
        args.repo,
        api=HfApi(endpoint=args.endpoint, token=token),
        token=token,
        token_env=args.token_env,
        runs=None if args.run_id is None else [args.run_id],
        progress=lambda line: print(line, flush=True),
    )
    print(result.summary())
    return FAILED if result.left else OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
