"""Does Ray Data's own checkpointing give this pipeline our sink's guarantees? Measured.

    python -m benchmarks.ray_checkpoint_probe [--rows 40] [--root DIR_OR_S3_URI]

Three measurements on a local Ray cluster (ray 2.60):

1. Our pipeline's plan shape, a stream consumed in the driver (`iter_batches`, which is
   how the sink commits one batch of trees at a time): is checkpointing applied?
2. The shape Ray supports, `read_json -> map_batches (slow, one output row per id) ->
   write_parquet` with `CheckpointConfig(id_column="problem_id")`: the job is SIGKILLed
   midway, then rerun with the same config.  Counts: ids written once, twice, missing;
   whether the rerun skipped ids that were already written.
3. Where the checkpoint lives: rows of the checkpoint folder after a killed run.

Prints one line per finding and `ray_checkpoint_duplicates=<n>` last.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

JOB = r"""
import json, sys, time, ray
from ray.data.checkpoint.interfaces import CheckpointConfig
src, out, ckpt, log = sys.argv[1:5]
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
ctx = ray.data.DataContext.get_current()
ctx.checkpoint_config = CheckpointConfig(id_column="problem_id", checkpoint_path=ckpt)

def search(batch):
    with open(log, "a") as f:  # which ids this run actually searched
        for pid in batch["problem_id"]:
            f.write(str(pid) + "\n")
    time.sleep(0.5)
    return {"problem_id": batch["problem_id"], "answer": [p + "!" for p in batch["problem_id"]]}

ds = ray.data.read_json(src).map_batches(search, batch_size=2)
ds.write_parquet(out, min_rows_per_file=1)
"""


def _run(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", JOB, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _ids(out: Path) -> Counter[str]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    files = sorted(out.glob("*.parquet")) if out.is_dir() else []
    return Counter(pid for f in files for pid in pq.read_table(f).column("problem_id").to_pylist())


def probe_driver_stream() -> str:
    import ray
    from ray.data.checkpoint.interfaces import CheckpointConfig

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ctx = ray.data.DataContext.get_current()
        with tempfile.TemporaryDirectory() as ckpt:
            ctx.checkpoint_config = CheckpointConfig(id_column="problem_id", checkpoint_path=ckpt)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                items = [{"problem_id": f"p{i}"} for i in range(4)]
                rows = [
                    r
                    for b in ray.data.from_items(items).iter_batches(batch_size=None)
                    for r in b["problem_id"]
                ]
            ctx.checkpoint_config = None
        disabled = [str(w.message) for w in seen if "checkpointing" in str(w.message).lower()]
        return f"driver stream (from_items -> iter_batches, {len(rows)} rows): " + (
            "checkpointing DISABLED: " + disabled[0] if disabled else "no warning"
        )
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40)
    args = parser.parse_args()
    print(probe_driver_stream())
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        src = root / "problems.jsonl"
        src.write_text(
            "".join(json.dumps({"problem_id": f"p{i}"}) + "\n" for i in range(args.rows))
        )
        out, ckpt = root / "out", root / "ckpt"
        first_log, second_log = root / "first.log", root / "second.log"
        job = _run(env, str(src), str(out), str(ckpt), str(first_log))
        deadline = time.monotonic() + 300
        while sum(_ids(out).values()) < 4 and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        before = _ids(out)
        ckpt_files = sorted(p.name for p in ckpt.rglob("*") if p.is_file()) if ckpt.exists() else []
        print(
            f"killed run: {sum(before.values())} rows written, checkpoint files {len(ckpt_files)}"
        )
        rerun = _run(env, str(src), str(out), str(ckpt), str(second_log))
        rerun.wait(timeout=600)
        after = _ids(out)
        searched_again = set(second_log.read_text().split()) if second_log.exists() else set()
        written_before = set(before)
        missing = [f"p{i}" for i in range(args.rows) if f"p{i}" not in after]
        duplicates = sum(n - 1 for n in after.values() if n > 1)
        print(
            f"rerun exit {rerun.returncode}: rows {sum(after.values())} for {len(after)} ids, "
            f"duplicates {duplicates}, missing {len(missing)}"
        )
        print(
            f"rerun searched {len(searched_again)} ids, of which "
            f"{len(searched_again & written_before)} were already written by the killed run"
        )
        left = sorted(p.name for p in ckpt.rglob("*") if p.is_file()) if ckpt.exists() else []
        print(
            f"checkpoint files after a successful rerun: {len(left)} "
            "(delete_checkpoint_on_success: a later run re-reads nothing)"
        )
        print(f"ray_checkpoint_duplicates={duplicates}")


if __name__ == "__main__":
    main()
