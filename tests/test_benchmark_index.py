"""benchmarks/README.md lists every benchmark, and every `python -m benchmarks.<name>` the
docs, the README, the Makefile and the scripts give names a module that exists (a moved or
removed benchmark fails here, not in a reader's shell).  The dated history
(docs/benchmarks.md) may also name a retired benchmark: one the index's retired table lists
with the commit that last holds it, so it can be rerun from git."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
INDEX = BENCHMARKS / "README.md"


def _modules() -> set[str]:
    """Dotted names under benchmarks/ that `python -m` can run or import."""
    names = set()
    for path in BENCHMARKS.rglob("*.py"):
        parts = path.relative_to(BENCHMARKS).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            parts = parts[:-1]
        if parts:
            names.add(".".join(parts))
    return names


def _retired() -> dict[str, str]:
    """Retired benchmark -> its last version, from the index's retired table."""
    section = INDEX.read_text(encoding="utf-8").split("\n## Retired\n", 1)[1].split("\n## ", 1)[0]
    rows = re.finditer(r"^\| `(\w+)` \|.*\| ([0-9a-f]{7,40}) \|$", section, re.MULTILINE)
    return {row.group(1): row.group(2) for row in rows}


def test_the_index_names_every_benchmark_module() -> None:
    index = INDEX.read_text(encoding="utf-8")
    top_level = {name for name in _modules() if "." not in name and name != "support"}
    missing = {name for name in top_level if f"`{name}" not in index and f"{name}.py" not in index}
    assert not missing, f"benchmarks/README.md has no row for {sorted(missing)}"
    helpers = {name for name in _modules() if name.startswith("support.")}
    missing = {name for name in helpers if f"{name.replace('.', '/')}.py" not in index}
    assert not missing, f"benchmarks/README.md does not list the helpers {sorted(missing)}"


def test_every_retired_benchmark_is_gone_and_its_last_version_holds_it() -> None:
    retired = _retired()
    assert retired, "benchmarks/README.md has no retired table"
    assert not set(retired) & _modules(), "a retired benchmark is still a module"
    try:
        if (
            subprocess.run(
                ["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True
            ).stdout.strip()
            != b"false"
        ):
            pytest.skip("a shallow clone lacks the commits the retired table names")
    except OSError:
        pytest.skip("not a git checkout")
    history = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for name, commit in retired.items():
        path = f"{commit}:benchmarks/{name}.py"
        found = subprocess.run(["git", "cat-file", "-e", path], cwd=REPO, capture_output=True)
        assert found.returncode == 0, f"{path} does not exist: the retired table's commit is wrong"
        assert f"`git show {path}`" in history, f"docs/benchmarks.md does not say where {name} is"


def test_every_benchmark_command_in_the_docs_names_a_module() -> None:
    files = [
        REPO / "README.md",
        REPO / "Makefile",
        INDEX,
        *(REPO / "docs").glob("*.md"),
        # files only: a test that imports scripts/check_figures leaves scripts/__pycache__
        *(path for path in (REPO / "scripts").glob("*") if path.is_file()),
    ]
    modules = _modules()
    retired = set(_retired())
    wrong = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        known = modules | retired if path.name == "benchmarks.md" else modules
        # `python -m benchmarks.x`, also wrapped onto the next line
        for match in re.finditer(r"-m\s+benchmarks\.([\w.]+\w)", text):
            if match.group(1) not in known:
                wrong.append(f"{path.relative_to(REPO)}: benchmarks.{match.group(1)}")
    assert not wrong, wrong
