"""A full disk under the output root: one clear line, no lost tree, on a real filesystem.

Every test mounts a small tmpfs (this needs root, or CAP_SYS_ADMIN: elsewhere the
tests are skipped, saying so) and fills it with a ballast file, so ENOSPC comes from
the kernel, not from a patched function.

* The sink alone: a batch that does not fit is `OutputFullError` carrying the batch's
  size on disk, and leaves no part, temp file or marker behind; the next batch, once
  there is room, commits.
* No room for even the lease and run.json: `bgmcts`'s synthesize exits 2 at once, the
  line naming the output root and the room run.json and the report need.
* The whole job (slow): the output root is a 2 MiB tmpfs mounted for the test (this needs root, or
CAP_SYS_ADMIN: elsewhere the test is skipped, saying so), with a ballast file leaving
`FREE` bytes: room for run.json and a tree or two, not for all twelve.  The job runs
for real (Ray, Serve, the load model; its command, `jobs.synthesize`'s `main`, in this
process on the session's cluster) and writes until the kernel answers ENOSPC.  It
must exit 2 with one error line that names the output root and the free space to
make, keep every tree it committed, and leave nothing half-written that a reader
would count.  Then the ballast is deleted and the same command runs again: it exits 0
with every problem searched exactly once, within the space the line asked for.
Unhandled, a full disk ended the job with exit 1 and `error: OSError: [Errno 28] Error
writing bytes to file...` (pyarrow's words), naming neither the root nor the space needed.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from jobs.synthesize import main as synth_main
from pipeline.errors import OutputFullError
from pipeline.records import error_row
from pipeline.store.filesystem import out_of_space
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from tests.tiny_run import tiny_run_config

SIZE = 2 * 1024 * 1024
FREE = 200 * 1024
PROBLEMS = 12


@pytest.fixture()
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A `SIZE` tmpfs at tmp_path/out, unmounted afterwards."""
    root = tmp_path / "out"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(root)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def _fill(root: Path, leave: int) -> Path:
    """A ballast file that leaves about `leave` bytes free on `root`'s filesystem."""
    ballast = root / "ballast"
    with ballast.open("wb") as handle:
        handle.write(b"\0" * max(0, _free(root) - leave))
    return ballast


def _run(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The job's command in this process (it joins the session's cluster): its exit
    status and what it wrote to stderr."""
    capsys.readouterr()
    code = synth_main(["--config", str(config)])
    return code, capsys.readouterr().err


def _errors(n: int, seed: int) -> list[dict[str, object]]:
    """`errors` rows of about 4 KiB each that Parquet cannot compress away."""
    return [
        error_row(f"p{seed}-{i}", "search", os.urandom(2048).hex(), run_id="r") for i in range(n)
    ]


def test_a_batch_that_does_not_fit_leaves_nothing_and_the_next_one_commits(
    tiny_disk: Path,
) -> None:
    ballast = _fill(tiny_disk, 300 * 1024)
    sink = ParquetSink(RunFolder.open(tiny_disk, "r"))
    committed = 0
    with pytest.raises(OutputFullError) as full:
        for batch in range(10):  # ~100 KiB each: the third or fourth does not fit
            sink.write_batch({"errors": _errors(25, batch)})
            committed += 1
    run_dir = tiny_disk / "run=r"
    assert 0 < committed < 10
    assert str(run_dir) in str(full.value) and "no space left on device (ENOSPC)" in str(full.value)
    assert full.value.needed_bytes >= 100 * 1024  # the whole batch, whole blocks
    # nothing of the failed batch is left: no part without its marker, no temp file
    markers = {p.name for p in (run_dir / "_committed").iterdir()}
    parts = list(run_dir.glob("*/part-*"))
    assert len(markers) == committed and not list(run_dir.rglob("*.tmp"))
    assert sorted(p.name.removeprefix("part-").split(".")[0] for p in parts) == sorted(markers)

    ballast.unlink()
    sink.write_batch({"errors": _errors(25, 99)})
    assert sink.folder.count("errors") == 25 * (committed + 1)
    assert ParquetSink(sink.folder).removed_uncommitted == 0


def test_no_room_for_run_json_is_exit_2_naming_the_root(
    tmp_path: Path, tiny_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"id": "p0", "question": "What is 1 + 1?", "answer": "2"}]
    config = tiny_run_config(tmp_path, rows, budget=32, engine={"kind": "load_model"}, run_id="f")
    config["output_root"] = str(tiny_disk)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    _fill(tiny_disk, 0)
    assert synth_main(["--config", str(path)]) == 2  # before: 1, "error: OSError: ..."
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: output_root {tiny_disk}: no space left on device"), err
    assert "free at least 512.0 KiB there (run.json and the report" in err, err


def test_quota_and_full_disk_errors_are_told_from_others() -> None:
    """The errno mapping alone (no filesystem here enforces a quota: the errors are made)."""
    import errno

    assert out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded")) == (
        "disk quota exceeded (EDQUOT)"
    )
    assert out_of_space(OSError(errno.ENOSPC, "No space left on device")) == (
        "no space left on device (ENOSPC)"
    )
    assert out_of_space(OSError(errno.EACCES, "Permission denied")) is None


@pytest.mark.e2e
def test_a_full_disk_is_exit_2_naming_the_root_and_the_space_and_a_rerun_completes(
    ray_cluster: None, tmp_path: Path, tiny_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}
        for i in range(PROBLEMS)
    ]
    engine = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 1.25,
        "decode_per_seq_ms": 0,
    }
    config = tiny_run_config(
        tmp_path, rows, budget=48, engine=engine, run_id="full", ray_num_cpus=2
    )
    # the first run's batches are looked for by name after the rerun, and the space the
    # rerun used is held against its estimate: a compaction would rewrite both
    config["compact"] = False
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    ballast = _fill(tiny_disk, FREE)

    code, err = _run(path, capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2, err[-3000:]  # before: 1
    assert len(errors) == 1, err[-3000:]
    line = errors[0]
    assert line.startswith(f"error: output_root {tiny_disk}: no space left on device"), line
    free = re.search(r"free about ([\d.]+) (KiB|MiB|GiB)", line)
    assert free is not None, line
    assert "not yet written" in line and "per tree" in line, line  # what the estimate is
    folder = RunFolder.open(tiny_disk, "full")
    committed = Counter(folder.read("trees").column("problem_id").to_pylist())
    assert all(n == 1 for n in committed.values()) and len(committed) < PROBLEMS
    kept = folder.committed_batches()

    ballast.unlink()  # the operator makes room and runs the same command again
    before = _free(tiny_disk)
    code, err = _run(path, capsys)
    assert code == 0, err[-3000:]
    used = before - _free(tiny_disk)
    estimate = float(free[1]) * 1024 ** ("KiB", "MiB", "GiB").index(free[2]) * 1024
    assert used <= estimate <= 3 * used, (estimate, used)  # the estimate covered the rerun
    trees = Counter(folder.read("trees").column("problem_id").to_pylist())
    assert trees == Counter(r["id"] for r in rows)  # every problem exactly once
    assert folder.count("errors") == 0
    run_dir = tiny_disk / "run=full"
    assert not list(run_dir.rglob("*.tmp"))
    batches = {p.name for p in (run_dir / "_committed").iterdir()}
    assert kept <= batches  # nothing the first run committed was lost
    parts = [p for p in run_dir.glob("*/part-*.parquet")]
    assert all(p.name.removeprefix("part-").split(".")[0] in batches for p in parts)
