"""Every measured figure in the README and docs names the commit it was measured at, and
says so when the code it measures changed after (scripts/check_figures.py).

When this fails after a code change, the message names the marker and the commit to put in
it: rerun the measurement and update the figure, or update the marker's
`code changed since`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_figures", REPO / "scripts" / "check_figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_figures"] = module
    spec.loader.exec_module(module)
    return module


figures = _load()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(autouse=True)
def _full_history() -> None:
    # The markers name commits of the project's history: a copy without it cannot check them.
    try:
        shallow = _git("rev-parse", "--is-shallow-repository")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    if shallow == "true":
        pytest.skip("a shallow clone lacks the commits the markers name")


def _marker(commit: str, what: str, since: str | None = None) -> object:
    return figures.Marker("README.md", 1, commit, what, since, f"x [measured: {commit}, {what}]")


def test_every_figure_names_its_commit_and_the_code_changes_since() -> None:
    markers, problems = figures.check()
    assert not problems, "\n".join(problems)
    assert len(markers) >= sum(least for _, _, least in figures.REQUIRED)


def test_a_figure_older_than_its_code_fails_and_names_the_change() -> None:
    paths = figures.MEASURES["benchmarks.node_loss"]
    last = _git("log", "-1", "--format=%H", "HEAD", "--", *paths)
    before = _git("rev-parse", f"{last}^")
    problem = figures.check_marker(_marker(before[:7], "benchmarks.node_loss"))
    assert problem is not None
    assert "stale figure" in problem and f"code changed since: {last[:7]}" in problem
    # naming that change makes it acceptable; naming an earlier one does not
    assert figures.check_marker(_marker(before[:7], "benchmarks.node_loss", last[:7])) is None
    older = _git("log", "-1", "--format=%H", f"{before}", "--", *paths)
    problem = figures.check_marker(_marker(before[:7], "benchmarks.node_loss", older[:7]))
    assert problem is not None and f"code changed since: {last[:7]}]" in problem


def test_a_current_figure_passes_and_may_not_claim_a_change() -> None:
    head = _git("rev-parse", "HEAD")
    assert figures.check_marker(_marker(head[:7], "benchmarks.node_loss")) is None
    problem = figures.check_marker(_marker(head[:7], "benchmarks.node_loss", head[:7]))
    assert problem is not None and "drop" in problem


def test_unknown_commits_measurements_and_unreadable_markers_fail() -> None:
    assert "does not exist" in str(figures.check_marker(_marker("0" * 12, "benchmarks.node_loss")))
    head = _git("rev-parse", "HEAD")
    assert "not a known measurement" in str(figures.check_marker(_marker(head, "benchmarks.nope")))
    assert figures.MARKER.fullmatch("[measured: d15c742 benchmarks.node_loss]") is None


def test_a_removed_marker_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    markers, _ = figures.find_markers()
    kept = [m for m in markers if m.what != "benchmarks.coalescing_cpu"]
    monkeypatch.setattr(figures, "find_markers", lambda: (kept, []))
    _, problems = figures.check()
    assert problems == [
        "docs/throughput.md: 1 figure(s) measured by benchmarks.coalescing_cpu must carry a "
        "'[measured: <commit>, benchmarks.coalescing_cpu]' marker, found 0"
    ]
