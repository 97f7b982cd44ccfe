"""The layers import one way: jobs -> pipeline -> actors -> search (read from the source).

A module may import its own layer and the layers below it, never one above; `search/`
imports neither Ray nor anything of ours outside `search/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("search", "actors", "pipeline", "jobs")  # lowest first


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


def test_search_is_free_of_ray() -> None:
    users = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "search").rglob("*.py"))
        if "ray" in _imported_packages(p)
    ]
    assert not users, f"search/ must not import Ray: {users}"
