"""The layers import one way: jobs -> pipeline -> actors -> common -> search (read from the
source).

A module may import its own layer and the layers below it, never one above; `search/`
imports neither Ray nor anything of ours outside `search/`.  `common/` (redaction, grading)
is what both `actors/` and `pipeline/` use: it imports none of `actors/`, `pipeline/` or
`jobs/`, and no Ray.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("search", "common", "actors", "pipeline", "jobs")  # lowest first


def _imported_packages(path: Path) -> set[str]:
    """Top-level names of every `import x` / `from x import y` in a file (nested ones too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_import_points_up_the_layers() -> None:
    upward = []
    for rank, layer in enumerate(LAYERS):
        above = set(LAYERS[rank + 1 :])
        for path in sorted((REPO / layer).rglob("*.py")):
            for name in sorted(_imported_packages(path) & above):
                upward.append(f"{path.relative_to(REPO)} imports {name}")
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_search_and_common_are_free_of_ray() -> None:
    users = [
        str(p.relative_to(REPO))
        for layer in ("search", "common")
        for p in sorted((REPO / layer).rglob("*.py"))
        if "ray" in _imported_packages(p)
    ]
    assert not users, f"search/ and common/ must not import Ray: {users}"


# pipeline/'s own layers, lowest first: a sub-package may import those before it, never one
# after it.  `errors` and `config` are modules of pipeline/ itself.
PIPELINE_LAYERS = (
    "errors",  # the input errors: InputError and its kinds (exit status 2 in jobs/exits.py)
    "problems",  # sources, the arithmetic generator, decontamination
    "records",  # one module per record type, the list of record types, grading
    "store",  # filesystems, the run folder, the sink, leases, resume
    "config",  # RunConfig: the whole run's YAML
    "report",  # the run report and the evaluation report code it shares
    "run",  # one synthesis run: stream and its rows, search actor, progress, nightly
    "publish",  # the Hub and the dataset card
    "evaluation",  # the evaluation grid
    "training",  # models from runs' rows: the one-pass PRM trainer, the GGUF export
)


def _pipeline_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "pipeline" and len(parts) > 1 else None


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Dotted modules a file imports (nested imports too); `from pkg import submodule`
    counts as importing the submodule."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                as_file = REPO / Path(*sub.split("."))
                is_module = as_file.with_suffix(".py").is_file() or as_file.is_dir()
                found.add(sub if is_module else node.module)
    return found


def _graph() -> dict[str, set[str]]:
    ours = [p for layer in LAYERS for p in sorted((REPO / layer).rglob("*.py"))]
    modules = {_module_of(p): p for p in ours}
    return {name: {m for m in _imports(path) if m in modules} for name, path in modules.items()}


def test_pipeline_sub_packages_import_one_way() -> None:
    upward = []
    for module, imported in _graph().items():
        here = _pipeline_part(module)
        if here is None:
            continue
        rank = PIPELINE_LAYERS.index(here)  # a new sub-package must be placed in the list
        for other in sorted(imported):
            there = _pipeline_part(other)
            if there is not None and PIPELINE_LAYERS.index(there) > rank:
                upward.append(f"{module} imports {other}")
    assert not upward, "pipeline/ imports pointing up its layers:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    # A package's __init__ re-exporting its modules is not a cycle with them unless one of
    # them imports the package root back.
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
