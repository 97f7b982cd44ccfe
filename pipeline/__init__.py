"""The synthesis pipeline: problems in, graded search trees out as Parquet (and to the Hub).

Its parts, each importing only those listed before it (`tests/test_layers.py` checks it):

* `errors` - the input errors that mean "fix it and run again" (exit status 2);
* `problems` - where problems come from: sources, the arithmetic generator, decontamination;
* `records` - graded trees as flat records: the Parquet schemas and their pure builders;
* `store` - where a run's rows live: filesystems, the run folder, the sink, leases, resume,
  the request log;
* `config` - `RunConfig`, a run's YAML validated;
* `report` - reports read from Parquet: the evaluation report, the run report, data hygiene;
* `run` - one synthesis run on Ray: the problem stream, the search actor, progress,
  the dry-run plan, nightly slices;
* `publish` - a run folder to a Hugging Face dataset repo, with its dataset card;
* `evaluation` - the paper's evaluation grid: methods x budgets x seeds, graded.

The model services (Serve deployments, engines) are in `actors/`, the search in `search/`,
the command-line entrypoints in `jobs/`.
"""
