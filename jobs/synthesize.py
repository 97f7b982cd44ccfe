"""Synthesis job: `python -m jobs.synthesize --config configs/local.yaml`.

Also the entrypoint of `ray job submit --working-dir . -- python -m jobs.synthesize
--config configs/...`: on a cluster it joins the cluster from RAY_ADDRESS.
Exit status: 0 when every problem was searched, 1 when some problems failed
(their errors are in errors/), 2 for a bad config.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.config import ConfigError, load_run_config


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/local.yaml", help="YAML run config")
    parser.add_argument("--output-root", help="overrides output_root of the config")
    parser.add_argument("--run-id", help="overrides run_id (rerun the same id to resume)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        config = load_run_config(args.config, output_root=args.output_root, run_id=args.run_id)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from pipeline.hub import HubPublishError
    from pipeline.run import publish_configured, synthesize

    summary = synthesize(config)
    print(summary.table())
    if config.publish.repo is not None:
        try:
            published = publish_configured(config, summary)
        except HubPublishError as exc:  # the local Parquet stays; the message says how to retry
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"  published to {published.repo_id}: {published.commit_url}")
    return 1 if summary.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
