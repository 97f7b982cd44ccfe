"""`bgmcts embedded-model`: a folder that cannot be written is one line naming its path,
exit 2 (each was a raw OSError, exit 1); a folder marked written is read again before it
is reused, and its files are readable by every replica.

These need no model: the folders are refused, or reused, before a GGUF is read.  The
folder reused is a checkpoint's surface (tests/prm_checkpoint.py: real config, tokenizer
and safetensors files) under the name the embedded model's folder has.  Writing the real
folder takes a minute; tests/jobs/test_export_gguf.py writes it once, and checks there
that a damaged one is written again and that what is written is readable by all.
"""

from __future__ import annotations

import importlib.metadata
import os
import stat
from pathlib import Path

import pytest

from actors.models import EMBEDDED_PACKAGE, embedded_model_folder, embedded_model_path
from jobs import cli
from jobs.exits import BAD_INPUT
from tests.prm_checkpoint import write_surface_prm


def _folder_name() -> str:
    version = importlib.metadata.version(EMBEDDED_PACKAGE)
    return f"{embedded_model_path().stem}-{EMBEDDED_PACKAGE}-{version}"


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = cli.main(["embedded-model", *argv])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_root_that_is_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    expected = f"error: --root: {afile} is a file, not a folder"
    assert _refused(["--root", str(afile)], capsys) == expected
    assert _refused(["--root", str(afile / "under" / "it")], capsys) == expected


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_a_root_without_write_permission_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        line = _refused(["--root", str(locked)], capsys)
        assert line.startswith(f"error: the embedded model folder {locked}/"), line
        assert f"cannot be written ({locked}/" in line and "Permission denied" in line
        line = _refused(["--root", str(locked / "sub")], capsys)
        assert line.startswith(f"error: --root: {locked / 'sub'} cannot be made (")
    finally:
        locked.chmod(0o755)


def test_a_root_that_cannot_be_made_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """/proc takes no new folders, not even from root (the tests may run as root)."""
    line = _refused(["--root", "/proc/bgmcts-embedded"], capsys)
    assert line.startswith("error: --root: /proc/bgmcts-embedded cannot be made (")


def test_a_file_where_the_folder_goes_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / _folder_name()).write_text("a stray file\n")
    assert _refused(["--root", str(tmp_path)], capsys) == (
        f"error: {tmp_path / _folder_name()} is a file, not the embedded model folder: move it away"
    )


def test_an_unusable_cache_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --root, the folder goes to $BGMCTS_CACHE (as a vLLM replica's does)."""
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    monkeypatch.setenv("BGMCTS_CACHE", str(afile / "cache"))
    line = _refused([], capsys)
    assert line.startswith(f"error: the embedded model folder {afile / 'cache'}/"), line
    assert f"cannot be written ({afile} is a file, not a folder); the cache is $BGMCTS_CACHE" in (
        line
    )


def test_a_whole_folder_is_reused_and_made_readable_by_every_replica(tmp_path: Path) -> None:
    """A folder an earlier version wrote with private weights (0600): reused as it is,
    its files made readable by all."""
    folder = write_surface_prm(tmp_path / _folder_name())
    (folder / ".complete").write_text("written\n")
    weights = folder / "model.safetensors"
    weights.chmod(0o600)
    folder.chmod(0o700)
    written = weights.stat().st_mtime_ns
    assert embedded_model_folder(tmp_path) == folder
    assert weights.stat().st_mtime_ns == written  # not written again
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
