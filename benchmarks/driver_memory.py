"""Driver memory before the search starts: how much the source's size costs the driver.

    python benchmarks/driver_memory.py [--rows 1000000] [--small-rows 10000] [--limit 10000]

Measures, in a fresh subprocess per source (RSS is the driver's resident set, from
/proc/self/status), what today's driver does before Ray Data sees a problem:
`load_problems` (JSONL source, `limit` problems selected) and the resume filter
(`pending` against an empty run).  A generated source of `--rows` rows and one of
`--small-rows` rows, same `--limit`.

This is the part of issue 10's benchmark that runs without a Ray cluster: the source
still goes through a Python list in the driver (ids are de-duplicated over the whole
source and the seeded shuffle needs every row), so this is the growth the streaming
source has to remove.  The end-to-end version (search actors, sleep engine, RSS after
1,000 and 10,000 problems) is not written yet.  The last line is
`driver_rss_growth_mb=<float>` for the large source (RSS after the resume filter minus
RSS after imports; the peak column shows the transient cost of reading the whole source).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, tempfile
def rss_mb(field="VmRSS:"):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0
start = rss_mb()
from pipeline.resume import pending
from pipeline.sink import ParquetSink
from pipeline.sources import load_problems, parse_source
imported = rss_mb()
src, limit = sys.argv[1], int(sys.argv[2])
cfg = parse_source({"kind": "jsonl", "path": src, "limit": limit,
                    "columns": {"problem": "question", "reference": "answer", "id": "id"}})
loaded = load_problems(cfg)
after_load = rss_mb()
with tempfile.TemporaryDirectory() as out:
    todo, bad = pending(loaded, ParquetSink(out, "bench", readonly=True))
after_resume = rss_mb()
print(json.dumps({"start": start, "imported": imported, "after_load": after_load,
                  "after_resume": after_resume, "peak": rss_mb("VmHWM:"),
                  "problems": len(todo)}))
"""


def _source(path: Path, rows: int) -> None:
    with path.open("w") as handle:
        for i in range(rows):
            row = {"id": f"p{i}", "question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}
            handle.write(json.dumps(row) + "\n")


def _measure(path: Path, limit: int) -> dict[str, float]:
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(limit)],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small-rows", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        results = {}
        for rows in (args.small_rows, args.rows):
            path = Path(temp) / f"source-{rows}.jsonl"
            _source(path, rows)
            results[rows] = _measure(path, args.limit)
    print(
        "| source rows | problems | RSS after imports (MB) | after load_problems "
        "| after resume filter | peak RSS | growth (MB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rows, r in results.items():
        growth = r["after_resume"] - r["imported"]
        print(
            f"| {rows:,} | {int(r['problems']):,} | {r['imported']:.0f} | {r['after_load']:.0f} "
            f"| {r['after_resume']:.0f} | {r['peak']:.0f} | {growth:.1f} |"
        )
    big = results[args.rows]
    print(f"driver_rss_growth_mb={big['after_resume'] - big['imported']:.1f}")


if __name__ == "__main__":
    main()
