"""Check that every measured figure in the README and docs names the commit it was measured
at, and that the code it measures has not changed since (or that the figure says so).

    python scripts/check_figures.py      # prints one line per marker; exit 1 on a problem

A measured figure carries a marker right after it, in the text a reader sees:

    [measured: d15c742, benchmarks.node_loss]
    [measured: d15c742, benchmarks.node_loss; code changed since: 6024fd4]

The first part is the commit whose code the figure was measured on, the second what
measured it: a key of ``MEASURES`` below, which lists the code paths that measurement
depends on.  The check, for each marker in README.md and docs/*.md (not docs/benchmarks.md,
the dated history, nor the generated docs/configuration.md and docs/records.md):

* the commit exists;
* the last commit that changed any of its code paths is the measured commit or one of its
  ancestors: the figure describes the code as it is.  If not, the figure is stale, and
  the marker must name that last change as ``code changed since`` (and the text say that
  the figure predates it) until someone reruns the measurement; a later change to the same
  code makes it stale again;
* every figure in ``REQUIRED`` still has its marker, so deleting one fails too.

Only ``git`` is run (``git cat-file``, ``git log``, ``git merge-base``): a second or so.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each measurement measures: the code whose change can move its figures.
MEASURES: dict[str, tuple[str, ...]] = {
    "benchmarks.night_allocation": (
        "benchmarks/night_allocation.py",
        "benchmarks/support/night_runs.py",
        "pipeline/evaluation/night_allocation.py",
        "pipeline/run/allocation.py",
        "pipeline/run/night_windows.py",
        "pipeline/run/window_stage.py",
        "pipeline/records/allocated.py",
        "pipeline/records/problem_trees.py",
        "search/simulated.py",
    ),
    "benchmarks.node_loss": (
        "benchmarks/node_loss.py",
        "pipeline/store/request_log.py",
        "actors/replay.py",
        "pipeline/run/synthesis.py",
    ),
    "benchmarks.month_of_nights": (
        "benchmarks/month_of_nights.py",
        "pipeline/publish/hub.py",
        "pipeline/publish/shards.py",
        "pipeline/publish/layout.py",
        "jobs/nightly.py",
    ),
    "benchmarks.engine_saturation": (
        "benchmarks/engine_saturation.py",
        "benchmarks/h100_goodput.py",
        "search/driver.py",
        "actors/admission.py",
        "actors/engines/load_model.py",
        "actors/engines/batching.py",
    ),
    "benchmarks.coalescing_cpu": (
        "benchmarks/coalescing_cpu.py",
        "actors/routing.py",
        "actors/coalesce.py",
        "actors/affinity.py",
    ),
    "benchmarks.scorer_value": (
        "benchmarks/scorer_value",
        "actors/one_pass.py",
        "actors/engines/transformers_prm.py",
        "actors/engines/load_model_prm.py",
        "actors/engines/step_layout.py",
        "pipeline/training/prm_training.py",
        "pipeline/training/prm_data.py",
        "pipeline/training/prm_trainer.py",
        "search/simulated.py",
    ),
    "benchmarks.self_improve": (
        "benchmarks/self_improve",
        "benchmarks/data_value",
        "configs/local.yaml",
        "configs/local-prm.yaml",
        "configs/prompts/arithmetic-fewshot-multistep.txt",
        "pipeline/training/gguf_export.py",
        "pipeline/training/prm_training.py",
        "pipeline/training/prm_trainer.py",
        "pipeline/problems/arithmetic.py",
        "pipeline/records/equations.py",
        "pipeline/records/trajectories.py",
    ),
    "benchmarks.data_value": (
        "benchmarks/data_value",
        "configs/local.yaml",
        "configs/prompts/arithmetic-fewshot.txt",
        "pipeline/problems/arithmetic.py",
        "pipeline/records/sft.py",
    ),
    "benchmarks.vllm_path": (
        "benchmarks/vllm_path.py",
        "benchmarks/scorer_value/gpu_hour.py",
        "configs/local.yaml",
        "configs/local-vllm.yaml",
        "configs/local-vllm-prm.yaml",
        "actors/engines/vllm_engine.py",
        "actors/engines/vllm_pooling.py",
        "actors/engines/one_pass_engine.py",
        "actors/engines/load_model_prm.py",
        "actors/engines/batching.py",
        "actors/models.py",
        "pipeline/report/engine_reads.py",
    ),
    "benchmarks.grading_worst_case": ("benchmarks/grading_worst_case.py", "common/grading.py"),
    "benchmarks.explorer_open": (
        "benchmarks/explorer_open.py",
        "pipeline/report/explorer.py",
        "pipeline/report/explorer_page.html",
        "tests/browser.py",
    ),
    # timings of a command or a test, not of a benchmark module
    "make-synth": (  # `make synth` on a clean clone
        "Makefile",
        "requirements-nodeps.txt",
        "configs/local.yaml",
        "configs/prompts/arithmetic-fewshot.txt",
        "pipeline/run/synthesis.py",
        "actors/engines/llamacpp.py",
        "actors/genprm.py",
        "search/driver.py",
    ),
    "configs/smoke-sleep.yaml": (
        "configs/smoke-sleep.yaml",
        "actors/engines/load_model.py",
        "pipeline/run/synthesis.py",
    ),
    "tests/pipeline/run/test_continuous_trees.py": (
        "tests/pipeline/run/test_continuous_trees.py",
        "configs/smoke-sleep.yaml",
        "pipeline/run/synthesis.py",
    ),
    "tests/pipeline/run/test_main_command_yields_training_data.py": (
        "tests/pipeline/run/test_main_command_yields_training_data.py",
        "configs/local.yaml",
        "pipeline/run/synthesis.py",
    ),
}

# Figures that must keep a marker: (file, measurement, how many markers at least).
REQUIRED: tuple[tuple[str, str, int], ...] = (
    ("README.md", "benchmarks.node_loss", 1),  # replay saved 98%, 1.3 kB per node
    ("README.md", "benchmarks.month_of_nights", 1),  # 621 files after 30 nights
    ("README.md", "benchmarks.data_value", 1),  # the held-out gain table
    ("docs/operations.md", "benchmarks.node_loss", 1),  # 0.978 / 0.990, 1.3 kB, 16 µs
    ("docs/operations.md", "benchmarks.grading_worst_case", 1),
    ("docs/operations.md", "tests/pipeline/run/test_main_command_yields_training_data.py", 1),
    ("docs/architecture.md", "configs/smoke-sleep.yaml", 1),
    ("docs/architecture.md", "tests/pipeline/run/test_continuous_trees.py", 1),
    ("docs/throughput.md", "benchmarks.coalescing_cpu", 1),  # the even router, 0.369 ms
    ("docs/throughput.md", "benchmarks.engine_saturation", 1),
    ("docs/data-value.md", "benchmarks.data_value", 1),
    ("docs/data-value.md", "benchmarks.self_improve", 1),  # the self-improvement round
    ("README.md", "benchmarks.vllm_path", 1),  # the embedded default on vLLM
    ("README.md", "make-synth", 1),  # the time and rows of the README's first command
    ("docs/scorers.md", "benchmarks.vllm_path", 1),  # rows per GPU-hour, read and stock
    ("docs/sizing.md", "benchmarks.engine_saturation", 2),  # goodput on the measured curve
    ("README.md", "benchmarks.explorer_open", 1),  # a 1,500-node tree opens within 2 s
)

# Not checked: the dated history names its own commits, the others are generated.
SKIPPED = ("docs/benchmarks.md", "docs/configuration.md", "docs/records.md")

MARKER = re.compile(
    r"\[measured: (?P<commit>[0-9a-f]{7,40}), (?P<what>[\w./-]+)"
    r"(?:; code changed since: (?P<since>[0-9a-f]{7,40}))?\]"
)
# every marker, read strictly by MARKER; `[measured: <commit>, ...]` is the form written out
LOOSE = re.compile(r"\[measured:(?! <)[^\]]*\]?")


@dataclass(frozen=True)
class Marker:
    path: str
    line: int
    commit: str
    what: str
    since: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def _full(commit: str) -> str | None:
    """The full hash of a commit that exists here, else None."""
    found = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    return found.stdout.strip() if found.returncode == 0 else None


def _is_ancestor(older: str, newer: str) -> bool:
    return _git("merge-base", "--is-ancestor", older, newer).returncode == 0


def _last_change(paths: tuple[str, ...]) -> str:
    return _git("log", "-1", "--format=%H", "HEAD", "--", *paths).stdout.strip()


def _describe(commit: str) -> str:
    return _git("log", "-1", "--format=%h (%ad, %s)", "--date=short", commit).stdout.strip()


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    return [ROOT / "README.md", *(p for p in docs if str(p.relative_to(ROOT)) not in SKIPPED)]


def find_markers() -> tuple[list[Marker], list[str]]:
    """Every marker in the checked documents, and the markers that do not parse."""
    markers, unreadable = [], []
    for doc in documents():
        name = str(doc.relative_to(ROOT))
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for loose in LOOSE.finditer(line):
                match = MARKER.fullmatch(loose.group(0))
                if match is None:
                    unreadable.append(
                        f"{name}:{number}: {loose.group(0)!r} is not "
                        "'[measured: <commit>, <what>]' or '[measured: <commit>, <what>; "
                        "code changed since: <commit>]'"
                    )
                    continue
                markers.append(
                    Marker(name, number, match["commit"], match["what"], match["since"], line)
                )
    return markers, unreadable


def check_marker(marker: Marker) -> str | None:
    """The problem with one marker, or None when it holds."""
    paths = MEASURES.get(marker.what)
    if paths is None:
        return (
            f"{marker.where}: {marker.what!r} is not a known measurement: add it and the code it "
            "measures to MEASURES in scripts/check_figures.py"
        )
    missing = [p for p in paths if not (ROOT / p).exists()]
    if missing:
        return (
            f"{marker.where}: MEASURES[{marker.what!r}] names {missing}, which no longer exist: "
            "point it at the code the measurement now depends on"
        )
    measured = _full(marker.commit)
    if measured is None:
        return f"{marker.where}: commit {marker.commit} of {marker.text.strip()!r} does not exist"
    last = _last_change(paths)
    fresh = _is_ancestor(last, measured)
    rerun = f"rerun `{_command(marker.what)}` and update the figure and its marker"
    if marker.since is None:
        if fresh:
            return None
        return (
            f"{marker.where}: stale figure: measured at {marker.commit}, but {_describe(last)} "
            f"changed {', '.join(paths)} since. Either {rerun}, or change the marker to "
            f"'[measured: {marker.commit}, {marker.what}; code changed since: {last[:7]}]' and "
            "say in the text that the figure predates that change"
        )
    since = _full(marker.since)
    if fresh:
        return (
            f"{marker.where}: the code has not changed since {marker.commit}: drop "
            f"'; code changed since: {marker.since}' from the marker"
        )
    if since != last:
        return (
            f"{marker.where}: the marker says the code changed since at {marker.since}, but the "
            f"last change to {', '.join(paths)} is {_describe(last)}: change the marker to "
            f"'[measured: {marker.commit}, {marker.what}; code changed since: {last[:7]}]', "
            f"or {rerun}"
        )
    return None


def _command(what: str) -> str:
    if what.startswith("benchmarks."):
        return f"python -m {what}"
    if what.startswith("tests/"):
        return f"python -m pytest {what}"
    return f"python -m jobs.synthesize --config {what}"


def check() -> tuple[list[Marker], list[str]]:
    """Every marker found, and every problem (an empty list: all hold)."""
    markers, problems = find_markers()
    problems += [p for p in map(check_marker, markers) if p is not None]
    for path, what, least in REQUIRED:
        count = sum(1 for m in markers if m.path == path and m.what == what)
        if count < least:
            problems.append(
                f"{path}: {least} figure(s) measured by {what} must carry a "
                f"'[measured: <commit>, {what}]' marker, found {count}"
            )
    return markers, problems


def main() -> int:
    markers, problems = check()
    for marker in markers:
        state = f"code changed since {marker.since}" if marker.since else "current"
        print(f"{marker.where}: {marker.what} at {marker.commit} ({state})")
    for problem in problems:
        print(f"FAIL {problem}")
    print(f"markers={len(markers)} problems={len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
