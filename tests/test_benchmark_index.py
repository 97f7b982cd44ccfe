"""benchmarks/README.md lists every benchmark, and every `python -m benchmarks.<name>` the
docs, the README, the Makefile and the scripts give names a module that exists (a moved or
removed benchmark fails here, not in a reader's shell)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


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


def test_the_index_names_every_benchmark_module() -> None:
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    top_level = {name for name in _modules() if "." not in name and name != "support"}
    missing = {name for name in top_level if f"`{name}" not in index and f"{name}.py" not in index}
    assert not missing, f"benchmarks/README.md has no row for {sorted(missing)}"
    helpers = {name for name in _modules() if name.startswith("support.")}
    missing = {name for name in helpers if f"{name.replace('.', '/')}.py" not in index}
    assert not missing, f"benchmarks/README.md does not list the helpers {sorted(missing)}"


def test_every_benchmark_command_in_the_docs_names_a_module() -> None:
    files = [
        REPO / "README.md",
        REPO / "Makefile",
        BENCHMARKS / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "scripts").glob("*"),
    ]
    modules = _modules()
    wrong = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        # `python -m benchmarks.x`, also wrapped onto the next line
        for match in re.finditer(r"-m\s+benchmarks\.([\w.]+\w)", text):
            if match.group(1) not in modules:
                wrong.append(f"{path.relative_to(REPO)}: benchmarks.{match.group(1)}")
    assert not wrong, wrong
