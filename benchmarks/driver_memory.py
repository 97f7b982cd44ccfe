"""Driver memory of a whole synthesis run: does it depend on the source's size?

    python -m benchmarks.driver_memory                  # the logged run: 1M and 10k rows,
                                                        # 10,000 problems each (~40 min on
                                                        # a loaded 2-core machine)
    python -m benchmarks.driver_memory --limit 2000     # what fits in a few minutes

For each source (a generated JSONL file of `--rows` rows, then one of `--small-rows`
rows) a fresh driver process runs `pipeline.run.synthesis.synthesize` on a local Ray cluster with
`configs/smoke-sleep.yaml`'s load model (its policy, scorer and engine settings; the
model-free engine with an H100's timing), `limit` = `--limit` problems of the source.
The driver's RSS (/proc/self/status VmRSS) is sampled when a problem is committed
(the sink's `write_batch`, wrapped in the child process only):

* `imports`: before `synthesize` (modules imported, nothing started);
* `start`: the first problem committed (Ray, Serve and the stream are up);
* `1,000` and `limit`: after that many problems are committed;
* `peak`: VmHWM over the whole run (the end-of-run report included).

The last line is `driver_rss_growth_mb=<float>`: RSS after `limit` problems minus RSS
at `start`, for the large source.  Trees are shortened to keep 10,000 problems within
minutes on 2 cores: `--budget 32` (one expansion of 2 choices of 16 tokens; the config
has 96) and `--trees-per-actor 32` (the config has 8); everything else is the config's.

With `--shuffle-rows N` (default: `--rows`) it also measures what a seeded shuffle of
the source costs the read task (`sources.iter_records`, run in a fresh process like a
Ray worker): time and peak RSS over the process's baseline, for `limit` records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Both measuring processes start with this: the imports and their RSS reader (MB).
_RSS_MB = r"""
import json, sys, time
def rss_mb(field="VmRSS:"):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0
"""

CHILD = (
    _RSS_MB
    + r"""from pipeline.config import load_run_config
from pipeline.problems.sources import parse_source
import pipeline.run.synthesis as run
import pipeline.store.sink as sink_module
args = json.loads(sys.argv[1])
marks = {1: "start", 1000: "1000", args["limit"]: "limit"}
samples = {"series": []}
done = [0]
class SamplingSink(sink_module.ParquetSink):
    def write_batch(self, records):
        batch = super().write_batch(records)
        errors = records.get("errors", [])
        if records.get("trees") or any(e.get("stage") != "source" for e in errors):
            done[0] += 1
            if done[0] in marks:
                samples[marks[done[0]]] = rss_mb()
            if done[0] % 1000 == 0:
                samples["series"].append([done[0], round(rss_mb(), 1)])
        return batch
run.ParquetSink = SamplingSink  # the run opens its sink by this name
config = load_run_config(args["config"], output_root=args["out"])
source = {"kind": "jsonl", "path": args["source"], "limit": args["limit"],
          "columns": {"problem": "question", "reference": "answer", "id": "id"}}
config = config.model_copy(update={
    "run_id": "driver-memory", "budget": args["budget"],
    "trees_per_actor": args["trees_per_actor"],
    "source": parse_source(source),
})
samples["imports"] = rss_mb()
t0 = time.perf_counter()
summary = run.synthesize(config, progress=None)
print(json.dumps({**samples, "end": rss_mb(), "peak": rss_mb("VmHWM:"),
                  "searched": summary.searched, "errors": summary.errors,
                  "problems": summary.problems, "wall_s": time.perf_counter() - t0}))
"""
)

SHUFFLE_CHILD = (
    _RSS_MB
    + r"""from pipeline.problems.sources import iter_records, parse_source
base = rss_mb()
cfg = parse_source({"kind": "jsonl", "path": sys.argv[1], "limit": int(sys.argv[2]),
                    "shuffle_seed": int(sys.argv[3]),
                    "columns": {"problem": "question", "reference": "answer", "id": "id"}})
t0 = time.perf_counter()
n = sum(1 for _ in iter_records(cfg))
print(json.dumps({"records": n, "seconds": time.perf_counter() - t0,
                  "base": base, "peak": rss_mb("VmHWM:")}))
"""
)


def _source(path: Path, rows: int) -> None:
    with path.open("w") as handle:
        for i in range(rows):
            row = {"id": f"p{i}", "question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}
            handle.write(json.dumps(row) + "\n")


def _child(code: str, *argv: str) -> dict[str, Any]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the measuring process failed (exit {done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small-rows", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=10_000)
    parser.add_argument("--budget", type=int, default=32)
    parser.add_argument("--trees-per-actor", type=int, default=32)
    parser.add_argument("--config", default=str(REPO / "configs" / "smoke-sleep.yaml"))
    parser.add_argument("--shuffle-rows", type=int, default=None, help="0: skip the shuffle")
    args = parser.parse_args()
    shuffle_rows = args.rows if args.shuffle_rows is None else args.shuffle_rows
    with tempfile.TemporaryDirectory() as temp:
        results: dict[int, dict[str, Any]] = {}
        for rows in (args.rows, args.small_rows):
            path = Path(temp) / f"source-{rows}.jsonl"
            _source(path, rows)
            spec = {
                "config": args.config,
                "out": str(Path(temp) / f"out-{rows}"),
                "source": str(path),
                "limit": args.limit,
                "budget": args.budget,
                "trees_per_actor": args.trees_per_actor,
            }
            started = time.perf_counter()
            results[rows] = _child(CHILD, json.dumps(spec))
            print(
                f"source of {rows:,} rows: {time.perf_counter() - started:.0f} s "
                f"{json.dumps(results[rows])}",
                file=sys.stderr,
                flush=True,
            )
        shuffle = None
        if shuffle_rows:
            path = Path(temp) / f"source-{shuffle_rows}.jsonl"
            if not path.exists():
                _source(path, shuffle_rows)
            shuffle = _child(SHUFFLE_CHILD, str(path), str(args.limit), "0")
    print(
        f"| source rows | problems | RSS before run (MB) | at start | after 1,000 "
        f"| after {args.limit:,} | growth start->{args.limit:,} | peak RSS | run (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rows, r in results.items():
        growth = r["limit"] - r["start"]
        print(
            f"| {rows:,} | {int(r['problems']):,} | {r['imports']:.0f} | {r['start']:.0f} "
            f"| {r.get('1000', float('nan')):.0f} | {r['limit']:.0f} | {growth:.1f} "
            f"| {r['peak']:.0f} | {r['wall_s']:.0f} |"
        )
    for rows, r in results.items():
        series = ", ".join(f"{n:,}: {mb:.0f}" for n, mb in r["series"])
        print(f"RSS (MB) every 1,000 problems, {rows:,}-row source: {series}")
    if shuffle is not None:
        print(
            f"seeded shuffle of {shuffle_rows:,} rows, {int(shuffle['records']):,} selected "
            f"(read task, 3 passes): {shuffle['seconds']:.1f} s, peak RSS "
            f"{shuffle['peak']:.0f} MB ({shuffle['peak'] - shuffle['base']:.0f} MB over "
            "the process baseline)"
        )
    big = results[args.rows]
    print(f"driver_rss_growth_mb={big['limit'] - big['start']:.1f}")


if __name__ == "__main__":
    main()
