"""Download what the configs read from the Hugging Face Hub into its cache, ahead of a run.

    bgmcts prefetch-models configs/nightly.yaml configs/math500-qwen2.5-7b.yaml
    bgmcts prefetch-models configs/nightly.yaml --list      the repositories only

The models of the vLLM engines and a Hub dataset source (`pipeline.run.model_cache`), into
the cache `HF_HOME` names.  jobs/model-cache.yaml runs it once on a CPU pod into the
volume every GPU pod mounts as its `HF_HOME`, so a nightly cluster loads its models from
that volume instead of downloading about 15 GB per GPU pod per night.  Rerun it after
changing a config's models (what is there already is not fetched again).  Gated models
need HF_TOKEN in the environment.

Exit status: 0 every repository is in the cache (their folders printed); 2 with one line
for a bad config, a repository the Hub refuses (missing, gated without a token), or a cache
that cannot be written (`HF_HOME` a file, a folder without permission, a full disk); 1 an
unexpected error (the network).
"""

from __future__ import annotations

import argparse

from jobs.exits import OK, add_verbose, guarded, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", help="run configs (YAML) whose models to fetch")
    parser.add_argument("--list", action="store_true", help="print the repositories, fetch none")
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    return guarded(lambda: _prefetch(args), verbose=args.verbose)


def _prefetch(args: argparse.Namespace) -> int:
    from pipeline.config import load_run_config
    from pipeline.run.model_cache import hub_repos, prefetch

    repos = hub_repos(load_run_config(path) for path in args.configs)
    if not repos:
        print("nothing to fetch: these configs read no model or dataset from the Hub")
        return OK
    for repo in repos:
        revision = f" @ {repo.revision}" if repo.revision else ""
        print(f"{repo.repo_type} {repo.repo_id}{revision}")
    if not args.list:
        for repo, folder in zip(repos, prefetch(repos), strict=True):
            print(f"cached {repo.repo_id}: {folder}")
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
