"""The nightly ledger as a hostile user meets it: one reading, checked whole, for the dry run
and the real run alike.

* a ledger file of the wrong shape is one line naming the file and the field, exit 2, for
  `jobs.nightly` and its `--dry-run`, and no ledger file is written or rewritten;
* a night whose source ends inside its slice (or before it) records the slice as ending
  there, so the problems past the end are taken by a later night once the source grows;
* the dry run plans the slice the real run takes, an earlier version's one-file ledger
  included;
* a "running" night whose run folder is gone, with no process behind it, is recorded
  failed with the reason and named with the command that resumes it; its rerun takes its
  slice again.

Nights that search problems would start Ray: the planning and the ledger are tested on
`plan_night` and `run_night` with a stand-in for the synthesizer that counts the slice
with the real source reader (`check_source`, what the synthesizer's summary reports), and
on `jobs.nightly` where no search starts (a bad ledger stops the job before anything else;
a night on an exhausted source starts no engine).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import RunConfig, parse_run_config
from pipeline.problems.sources import check_source
from pipeline.run.night_ledger import CLAIM_GRACE, GONE, LedgerError, read_ledger
from pipeline.run.nightly import Ledger, NightSlice, plan_night, run_night
from pipeline.run.summary import RunSummary
from pipeline.store.filesystem import open_store
from tests.tiny_run import REPO, run_config

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

ENGINE = {"kind": "load_model", "output_tokens": 8, "decode_base_ms": 1.25, "decode_per_seq_ms": 0}


def _problems(path: Path, count: int) -> Path:
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(count)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _setup(tmp_path: Path, count: int = 10, per_night: int = 2) -> tuple[Path, RunConfig]:
    """A config file over `count` problems (tmp_path/problems.jsonl), output in tmp_path/out."""
    data = run_config(
        _problems(tmp_path / "problems.jsonl", count),
        tmp_path / "out",
        budget=200,
        engine=ENGINE,
        nightly={"problems_per_night": per_night, "run_id_prefix": "n-"},
        ray_num_cpus=2,
    )
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, parse_run_config(data)


def _counting(night: RunConfig) -> RunSummary:
    """Stands in for the synthesizer (which needs Ray): a summary whose `problems` is the
    slice's size as the real source reader counts it, nothing searched."""
    summary = RunSummary(night.resolved_run_id, Path(night.output_root) / "unused")
    summary.problems = check_source(night.source)
    return summary


def _night(config: RunConfig, date: str) -> NightSlice:
    """One whole night as jobs.nightly runs it, searching nothing: plan, run, mark done."""
    ledger, night = plan_night(config, dt.date.fromisoformat(date))
    _, night = run_night(config, ledger, night, _counting)
    ledger.mark(night.date, "done", reason=None, left=0)
    return night


def _nightly(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.nightly ARGS`, as cron runs it."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "jobs.nightly", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _slot(seq: int, body: Any = None, **fields: Any) -> tuple[str, Any]:
    """A slot file (its path under the output root, its JSON): `body` whole, or `fields`."""
    return f"nightly-ledger/{seq:08d}.json", fields if body is None and fields else body


GOOD = {"date": "2026-11-20", "run_id": "n-2026-11-20", "skip": 0, "limit": 2, "status": "done"}
NEXT = {"date": "2026-11-21", "run_id": "n-2026-11-21", "skip": 2, "limit": 2, "status": "done"}

# (name, files {path under the output root: JSON value, or bytes as written}, words the
# one line must hold besides the file's name)
BAD_LEDGERS: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "slot without date",
        dict([_slot(1, **{k: v for k, v in GOOD.items() if k != "date"})]),
        ("date", "missing"),
    ),
    ("string limit", dict([_slot(1, **{**GOOD, "limit": "2"})]), ("limit",)),
    ("float limit", dict([_slot(1, **{**GOOD, "limit": 2.0})]), ("limit",)),
    ("bool skip", dict([_slot(1, **{**GOOD, "skip": True})]), ("skip",)),
    ("negative limit", dict([_slot(1, **{**GOOD, "limit": -3})]), ("limit",)),
    ("negative skip", dict([_slot(1, **{**GOOD, "skip": -1})]), ("skip",)),
    ("limit past any record", dict([_slot(1, **{**GOOD, "limit": 10**30})]), ("limit",)),
    ("null limit", dict([_slot(1, **{**GOOD, "limit": None})]), ("limit",)),
    ("date with slashes", dict([_slot(1, **{**GOOD, "date": "2026/11/20"})]), ("date",)),
    ("date without dashes", dict([_slot(1, **{**GOOD, "date": "20261120"})]), ("date",)),
    ("no such day", dict([_slot(1, **{**GOOD, "date": "2026-02-30"})]), ("date",)),
    ("date as a number", dict([_slot(1, **{**GOOD, "date": 20261120})]), ("date",)),
    ("unknown status", dict([_slot(1, **{**GOOD, "status": "finished"})]), ("status",)),
    ("misspelt key", dict([_slot(1, **{**GOOD, "limti": 2})]), ("limti",)),
    ("run id outside the rule", dict([_slot(1, **{**GOOD, "run_id": "../../etc"})]), ("run_id",)),
    (
        "NaN spent",
        {
            "nightly-ledger/00000001.json": json.dumps({**GOOD, "spent": 1})
            .replace("1}", "NaN}")
            .encode()
        },
        ("spent",),
    ),
    ("negative spent", dict([_slot(1, **{**GOOD, "spent": -5.0})]), ("spent",)),
    (
        "updated_at not a time",
        dict([_slot(1, **{**GOOD, "updated_at": "yesterday"})]),
        ("updated_at",),
    ),
    ("a list, not an object", dict([_slot(1, [GOOD])]), ("JSON object",)),
    ("null", dict([_slot(1, None)]), ("JSON object",)),
    ("a string", dict([_slot(1, "2026-11-20")]), ("JSON object",)),
    ("not JSON", {"nightly-ledger/00000001.json": b"{not json"}, ("not JSON",)),
    ("empty file", {"nightly-ledger/00000001.json": b""}, ("not JSON",)),
    ("truncated", {"nightly-ledger/00000001.json": json.dumps(GOOD).encode()[:20]}, ("not JSON",)),
    ("not UTF-8", {"nightly-ledger/00000001.json": b'{"date": "\xff"}'}, ("UTF-8",)),
    (
        "a key given twice",
        {
            "nightly-ledger/00000001.json": json.dumps(GOOD)
            .replace('"limit": 2', '"limit": 2, "limit": 9')
            .encode()
        },
        ("limit", "twice"),
    ),
    (
        "pid past any process",
        dict([_slot(1, **{**GOOD, "status": "running", "host": "h", "pid": 10**20})]),
        ("pid",),
    ),
    ("the ledger folder a file", {"nightly-ledger": b"{}"}, ("not a folder",)),
    (
        "same date twice",
        dict([_slot(1, **GOOD), _slot(2, **{**NEXT, "date": GOOD["date"]})]),
        ("date", "twice"),
    ),
    (
        "same run id twice",
        dict([_slot(1, **GOOD), _slot(2, **{**NEXT, "run_id": GOOD["run_id"]})]),
        ("run_id", "twice"),
    ),
    (
        "overlapping slices",
        dict([_slot(1, **GOOD), _slot(2, **{**NEXT, "skip": 1})]),
        ("overlaps",),
    ),
    (
        "the same slice twice",
        dict([_slot(1, **GOOD), _slot(2, **{**NEXT, "skip": 0})]),
        ("overlaps",),
    ),
    (
        "extension of no night",
        dict([_slot(1, date="2026-11-20", extends=True, skip=0, limit=1)]),
        ("extends",),
    ),
    (
        "extension with a gap",
        dict([_slot(1, **GOOD), _slot(2, date=GOOD["date"], extends=True, skip=5, limit=1)]),
        ("skip", "continue"),
    ),
    (
        "extension that is false",
        dict([_slot(1, **GOOD), _slot(2, date=GOOD["date"], extends=False, skip=2, limit=1)]),
        ("extends",),
    ),
    (
        "extension with status",
        dict(
            [
                _slot(1, **GOOD),
                _slot(2, date=GOOD["date"], extends=True, skip=2, limit=1, status="done"),
            ]
        ),
        ("status",),
    ),
    ("short slot name", {"nightly-ledger/1.json": GOOD}, ("slot file name",)),
    (
        "other name",
        {"nightly-ledger/00000001.json": GOOD, "nightly-ledger/notes.json": {}},
        ("slot file name",),
    ),
    ("one-file ledger as a list", {"nightly-ledger.json": [GOOD]}, ("JSON object",)),
    ("one-file ledger without nights", {"nightly-ledger.json": {"night": [GOOD]}}, ("nights",)),
    ("one-file ledger nights not a list", {"nightly-ledger.json": {"nights": GOOD}}, ("nights",)),
    (
        "one-file ledger string skip",
        {"nightly-ledger.json": {"nights": [{**GOOD, "skip": "0"}]}},
        ("nights.0.skip",),
    ),
    (
        "one-file ledger same date twice",
        {"nightly-ledger.json": {"nights": [GOOD, {**NEXT, "date": GOOD["date"]}]}},
        ("twice",),
    ),
    ("one-file ledger not JSON", {"nightly-ledger.json": b'{"nights": [}'}, ("not JSON",)),
    (
        "one-file ledger beside other slot files",
        {"nightly-ledger.json": {"nights": [GOOD]}, "nightly-ledger/00000001.json": NEXT},
        ("other nights",),
    ),
]


def _write(root: Path, files: dict[str, Any]) -> None:
    for name, value in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value if isinstance(value, bytes) else json.dumps(value).encode())


@pytest.mark.parametrize(
    ("files", "words"), [(f, w) for _, f, w in BAD_LEDGERS], ids=[n for n, _, _ in BAD_LEDGERS]
)
def test_a_bad_ledger_is_one_line_naming_the_file_exit_2_and_is_never_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, Any],
    words: tuple[str, ...],
) -> None:
    from jobs.nightly import main

    path, _ = _setup(tmp_path)
    root = tmp_path / "out"
    _write(root, files)
    before = _snapshot(root)
    for dry_run in (["--dry-run"], []):
        assert main(["--config", str(path), "--date", "2026-11-22", *dry_run]) == 2
        err = capsys.readouterr().err
        lines = err.splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        named = [name for name in files if str(root / name) in lines[0]]
        assert lines[0].startswith("error: ") and named, lines[0]
        assert all(word in lines[0] for word in words), lines[0]
    assert _snapshot(root) == before  # nothing written, nothing rewritten, nothing new


def test_the_command_line_says_the_same_one_line(tmp_path: Path) -> None:
    """As cron runs it: a subprocess (the dry run is the same code, tested in process)."""
    path, _ = _setup(tmp_path)
    _write(tmp_path / "out", dict([_slot(1, **{**GOOD, "limit": "5"})]))
    done = _nightly("--config", str(path), "--date", "2026-11-22")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'out' / 'nightly-ledger' / '00000001.json'}: bad nightly ledger: "
        "limit: Input should be a valid integer (got '5') (nothing was written)"
    ]


def test_a_good_ledger_with_every_field_reads_back(tmp_path: Path) -> None:
    full = {
        **GOOD,
        "status": "failed",
        "updated_at": "2026-11-20T03:00:00+00:00",
        "reason": "wall time",
        "spent": 400,  # an int where a float goes: JSON writes 400.0 as 400 in some tools
        "envelope": 450.0,
        "max_wall_s": 3600,
        "left": 1,
        "searched": 1,
        "errors": 0,
        "host": "elsewhere",
        "pid": 7,
    }
    _write(
        tmp_path,
        dict([_slot(1, **full), _slot(2, date=GOOD["date"], extends=True, skip=2, limit=1)]),
    )
    (night,) = Ledger(tmp_path, read_only=True).nights
    assert night["limit"] == 3 and night["spent"] == 400 and night["reason"] == "wall time"


def test_a_night_on_an_exhausted_source_does_not_claim_past_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The source holds 4 problems: two nights take them; the third night, run by the real
    job (no problem: no engine starts), finds none; the source grows; the next night
    takes the new problems from the first one on, and the dry run says so first."""
    from jobs.nightly import main

    path, config = _setup(tmp_path, count=4)
    assert _night(config, "2026-11-20").skip == 0
    assert _night(config, "2026-11-21").skip == 2
    assert main(["--config", str(path), "--date", "2026-11-22"]) == 0
    assert "source exhausted" in capsys.readouterr().out
    night = Ledger(tmp_path / "out").find("2026-11-22")
    assert night is not None
    assert (night["skip"], night["limit"], night["status"]) == (4, 0, "done")

    _problems(tmp_path / "problems.jsonl", 7)  # the source grows by three
    assert main(["--config", str(path), "--date", "2026-11-23", "--dry-run"]) == 0
    assert "night 2026-11-23: problems 4..5 (new" in capsys.readouterr().out
    assert _night(config, "2026-11-23") == NightSlice("2026-11-23", "n-2026-11-23", 4, 2)
    # a slice the source ends inside ends there: p6 is the only problem left
    assert _night(config, "2026-11-24") == NightSlice("2026-11-24", "n-2026-11-24", 6, 1)
    _problems(tmp_path / "problems.jsonl", 9)
    assert _night(config, "2026-11-25") == NightSlice("2026-11-25", "n-2026-11-25", 7, 2)
    # every problem in exactly one night's slice, none past the source's end
    held = sorted(
        i for n in Ledger(tmp_path / "out").nights for i in range(n["skip"], n["skip"] + n["limit"])
    )
    assert held == list(range(9))


def test_an_exhausted_night_that_ran_beside_a_later_one_leaves_its_problems_to_the_next(
    tmp_path: Path,
) -> None:
    """Nights 22 and 23 both start on an exhausted source of 4 (23 while 22 still runs),
    so each claims a slice past the end; both find nothing.  The source grows: the next
    night takes problem 4 on, not the problems after 23's claim."""
    _, config = _setup(tmp_path, count=4)
    _night(config, "2026-11-20")
    _night(config, "2026-11-21")
    first, d22 = plan_night(config, dt.date(2026, 11, 22))
    second, d23 = plan_night(config, dt.date(2026, 11, 23))
    assert (d22.skip, d23.skip) == (4, 6)
    run_night(config, second, d23, _counting)
    run_night(config, first, d22, _counting)
    _problems(tmp_path / "problems.jsonl", 10)
    assert _night(config, "2026-11-24").skip == 4
    assert _night(config, "2026-11-25").skip == 6


def test_a_spend_capped_night_whose_source_ends_is_not_topped_up(tmp_path: Path) -> None:
    data = yaml.safe_load(_setup(tmp_path, count=3, per_night=5)[0].read_text())
    data["nightly"]["budget_per_night"] = 450.0
    config = parse_run_config(data)
    ledger, night = plan_night(config, dt.date(2026, 11, 20))
    assert night.limit == 2

    limits: list[int] = []

    def synthesize(night_cfg: RunConfig) -> RunSummary:
        limits.append(night_cfg.source.limit or 0)
        return _counting(night_cfg)

    _, night = run_night(config, ledger, night, synthesize)  # no trees: nothing spent
    # 2 fit the cap, then a top-up of 2 more (2 x 200 <= 450 - 0): the source holds only 1
    assert limits == [2, 4]
    assert (night.skip, night.limit) == (0, 3)
    assert [(s.body["skip"], s.body["limit"]) for s in Ledger(tmp_path / "out").slots] == [
        (0, 2),
        (2, 1),
    ]


def test_the_dry_run_plans_what_the_run_takes_from_a_one_file_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.nightly import main

    path, config = _setup(tmp_path)
    old = [
        {"date": "2026-11-18", "run_id": "n-2026-11-18", "skip": 0, "limit": 2, "status": "done"},
        {"date": "2026-11-19", "run_id": "n-2026-11-19", "skip": 2, "limit": 3, "status": "done"},
    ]
    legacy = tmp_path / "out" / "nightly-ledger.json"
    legacy.parent.mkdir()
    legacy.write_text(json.dumps({"nights": old}))
    before = _snapshot(tmp_path / "out")
    assert main(["--config", str(path), "--date", "2026-11-20", "--dry-run"]) == 0
    assert "night 2026-11-20: problems 5..6 (new" in capsys.readouterr().out
    assert _snapshot(tmp_path / "out") == before  # read, not carried over
    _, night = plan_night(config, dt.date(2026, 11, 20))
    assert (night.skip, night.limit) == (5, 2)
    assert main(["--config", str(path), "--date", "2026-11-19", "--dry-run"]) == 0
    assert "night 2026-11-19: problems 2..4 (recorded, done)" in capsys.readouterr().out


def test_a_carry_over_that_stopped_before_setting_the_old_file_aside_is_finished(
    tmp_path: Path,
) -> None:
    _, config = _setup(tmp_path)
    old = {"nights": [GOOD]}
    _write(tmp_path / "out", {"nightly-ledger.json": old, "nightly-ledger/00000001.json": GOOD})
    assert Ledger(tmp_path / "out", read_only=True).preview("2026-11-21", "x", 0, 2).skip == 2
    _, night = plan_night(config, dt.date(2026, 11, 21))
    assert night.skip == 2
    assert not (tmp_path / "out" / "nightly-ledger.json").exists()
    assert json.loads((tmp_path / "out" / "nightly-ledger.json.carried-over").read_text()) == old


def _running(date: str, skip: int, **claim: Any) -> dict[str, Any]:
    return {
        "date": date,
        "run_id": f"n-{date}",
        "skip": skip,
        "limit": 2,
        "status": "running",
        **claim,
    }


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_running_night_whose_run_folder_is_gone_is_failed_and_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nights left "running" with no run folder: one claimed by hand (nobody named), one
    by a process of this host that has ended, one by another host a day ago, one by
    another host "a day from now".  Two are live claims whose run folder does not exist
    yet (this process's, another host's a minute ago): they stay running."""
    from jobs.nightly import main

    path, config = _setup(tmp_path)
    long_ago = (dt.datetime.now(dt.UTC) - CLAIM_GRACE * 24).isoformat(timespec="seconds")
    just_now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    ahead = (dt.datetime.now(dt.UTC) + CLAIM_GRACE * 24).isoformat(timespec="seconds")
    host = socket.gethostname()
    nights = [
        _running("2026-11-15", 0),
        _running("2026-11-16", 2, host=host, pid=_dead_pid(), updated_at=just_now),
        _running("2026-11-17", 4, host="elsewhere", pid=1, updated_at=long_ago),
        _running("2026-11-18", 6, host=host, pid=os.getpid(), updated_at=long_ago),
        _running("2026-11-19", 8, host="elsewhere", pid=1, updated_at=just_now),
        _running("2026-11-14", 10, host="elsewhere", pid=1, updated_at=ahead),
    ]
    _write(tmp_path / "out", dict(_slot(i, **n) for i, n in enumerate(nights, start=1)))
    before = _snapshot(tmp_path / "out")

    assert main(["--config", str(path), "--date", "2026-11-20", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "night 2026-11-20: problems 12..13 (new" in captured.out
    warned = [line for line in captured.err.splitlines() if line.startswith("warning: night")]
    assert len(warned) == 6
    for date in ("2026-11-14", "2026-11-15", "2026-11-16", "2026-11-17"):
        assert (
            f"warning: night {date} is failed ({GONE}); resume it with python -m jobs.nightly "
            f"--config {path} --date {date}"
        ) in warned
    assert _snapshot(tmp_path / "out") == before  # the dry run writes nothing

    _, night = plan_night(config, dt.date(2026, 11, 20))
    assert night.skip == 12
    status = {n["date"]: (n["status"], n.get("reason")) for n in Ledger(tmp_path / "out").nights}
    assert status == {
        "2026-11-14": ("failed", GONE),
        "2026-11-15": ("failed", GONE),
        "2026-11-16": ("failed", GONE),
        "2026-11-17": ("failed", GONE),
        "2026-11-18": ("running", None),
        "2026-11-19": ("running", None),
        "2026-11-20": ("running", None),
    }
    # rerunning a gone night takes its slice again, claimed by this process
    _, again = plan_night(config, dt.date(2026, 11, 16))
    assert (again.skip, again.limit) == (2, 2)
    rerun = Ledger(tmp_path / "out").find("2026-11-16")
    assert rerun is not None and rerun["status"] == "running" and rerun["pid"] == os.getpid()


def test_a_night_whose_run_folder_exists_is_left_to_its_run(tmp_path: Path) -> None:
    _write(tmp_path, dict([_slot(1, **_running("2026-11-15", 0))]))
    (tmp_path / "run=n-2026-11-15").mkdir()
    reading = read_ledger(open_store(tmp_path))
    assert reading.gone == [] and reading.nights[0]["status"] == "running"


def test_a_publish_only_night_whose_run_folder_is_gone_is_searched_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.nightly import main

    path, _ = _setup(tmp_path)
    failed = {**GOOD, "status": "failed", "reason": "publish"}
    _write(tmp_path / "out", dict([_slot(1, **failed)]))
    (tmp_path / "out" / "run=n-2026-11-20").mkdir()
    assert main(["--config", str(path), "--date", "2026-11-20", "--dry-run"]) == 0
    assert "a run would publish it only" in capsys.readouterr().out
    (tmp_path / "out" / "run=n-2026-11-20").rmdir()
    assert main(["--config", str(path), "--date", "2026-11-20", "--dry-run"]) == 0
    assert "a run would publish it only" not in capsys.readouterr().out


def test_reading_names_the_first_bad_file_and_raises_an_input_error(tmp_path: Path) -> None:
    _write(tmp_path, dict([_slot(1, **GOOD), _slot(2, **{**NEXT, "skip": "2"})]))
    with pytest.raises(LedgerError, match=r"00000002\.json: bad nightly ledger: skip: "):
        Ledger(tmp_path)


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_an_output_root_that_cannot_hold_a_ledger_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """A file where the output root (or a folder above it) should be: one line naming the
    output root, exit 2, for the run (and, where the root itself is the file, the dry run)."""
    from jobs.nightly import main

    path, _ = _setup(tmp_path)
    (tmp_path / "a-file").write_text("not a folder\n")
    root = tmp_path / where
    args = ["--config", str(path), "--output-root", str(root), "--date", "2026-11-20"]
    runs = [args, [*args, "--dry-run"]] if where == "a-file" else [args]
    for run in runs:
        assert main(run) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: output_root {root}: ") and err.count("\n") == 1, err
    assert (tmp_path / "a-file").read_text() == "not a folder\n"
