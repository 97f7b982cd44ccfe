"""Print the tree's code-health measures (docs/benchmarks.md, "Code health").

    python scripts/code_health.py [--walk pipeline.records.build:records_for]

* functions over 80 lines outside tests/;
* issue numbers in code, tests and scripts (a newcomer cannot look them up);
* the walk from one function: its calls read depth-first, each function once, in source
  order, counting the moves a reader makes between them: within a file, back to a file
  already left, and up a layer (search < actors < pipeline < jobs).

Static (`ast`) only: calls through attributes and methods are not followed.
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("search", "common", "actors", "pipeline", "jobs", "benchmarks", "scripts")
LAYER = {"search": 0, "common": 1, "actors": 2, "pipeline": 3, "jobs": 4}
ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues? ?#?\d+")
LONG = 80


def long_functions() -> list[tuple[int, str]]:
    found = []
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > LONG:
                        where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                        found.append((lines, where))
    return sorted(found, reverse=True)


def issue_references() -> list[str]:
    paths = [p for folder in (*CODE, "tests") for p in (ROOT / folder).rglob("*.py")]
    paths += [*(ROOT / "scripts").glob("*.sh"), ROOT / "Makefile", ROOT / ".ci" / "run"]
    return [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(paths)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]


@dataclass
class _Module:
    path: str
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    imports: dict[str, tuple[str, str]]


@dataclass
class Walk:
    modules: dict[str, _Module | None] = field(default_factory=dict)
    order: list[tuple[str, str]] = field(default_factory=list)

    def module(self, name: str) -> _Module | None:
        if name not in self.modules:
            base = ROOT / name.replace(".", "/")
            path = base.with_suffix(".py") if base.with_suffix(".py").exists() else None
            if path is None and (base / "__init__.py").exists():
                path = base / "__init__.py"
            self.modules[name] = None if path is None else _parse(path)
        return self.modules[name]

    def resolve(self, module: str, name: str, hops: int = 0) -> tuple[str, str] | None:
        found = self.module(module)
        if found is None or hops > 5:
            return None
        if name in found.functions:
            return module, name
        source = found.imports.get(name)
        if source is not None and source[0].split(".")[0] in LAYER:
            return self.resolve(*source, hops + 1)
        return None

    def follow(self, module: str, name: str) -> None:
        if (module, name) in self.order:
            return
        self.order.append((module, name))
        found = self.module(module)
        assert found is not None
        calls = [n for n in ast.walk(found.functions[name]) if isinstance(n, ast.Call)]
        for call in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(call.func, ast.Name):
                callee = self.resolve(module, call.func.id)
                if callee is not None:
                    self.follow(*callee)

    def moves(self) -> dict[str, int]:
        files = [self.modules[m].path for m, _ in self.order]  # type: ignore[union-attr]
        counts = {"functions": len(self.order), "files": len(set(files))}
        counts |= {"within a file": 0, "back to a file left": 0, "up a layer": 0}
        left: set[str] = set()
        steps = zip(self.order, self.order[1:], files, files[1:], strict=False)
        for (before, _), (after, _), before_file, after_file in steps:
            if after_file == before_file:
                counts["within a file"] += 1
                continue
            left.add(before_file)
            counts["back to a file left"] += after_file in left
            counts["up a layer"] += LAYER[after.split(".")[0]] > LAYER[before.split(".")[0]]
        return counts


def _parse(path: Path) -> _Module:
    tree = ast.parse(path.read_text())
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    imports: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.setdefault(node.name, node)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module, alias.name)
    return _Module(str(path.relative_to(ROOT)), functions, imports)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", default="pipeline.records.build:records_for")
    args = parser.parse_args()
    long = long_functions()
    print(f"functions over {LONG} lines outside tests: {len(long)}")
    for lines, where in long:
        print(f"  {lines:4d} {where}")
    references = issue_references()
    print(f"issue references: {len(references)}")
    for where in references:
        print(f"  {where}")
    walk = Walk()
    module, _, name = args.walk.partition(":")
    walk.follow(module, name)
    print(f"walk from {args.walk}: " + ", ".join(f"{k} {v}" for k, v in walk.moves().items()))


if __name__ == "__main__":
    main()
