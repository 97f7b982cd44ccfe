"""The scenario registry (tests/scenarios.py) against the tests and docs, read from source.

A scenario leaves the landing gate only with a small real version that stays in it: these
checks fail when a marker names no scenario, a scenario is marked nowhere, or its gate
version is missing or is itself left out of the gate.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def _scenario_calls(tree: ast.AST) -> list[ast.Call]:
    """Every `...scenario("name")` call in a parsed file (a decorator, a pytestmark, a
    `pytest.param` mark)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "scenario"
    ]


def _is_scenario(node: ast.AST) -> bool:
    return bool(_scenario_calls(node)) and not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "param"
        for n in ast.walk(node)
    )


def _scenario_params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The ids of a test's `pytest.param(...)` cases marked as a scenario ("" if the whole
    test is one)."""
    ids = set()
    for decorator in function.decorator_list:
        for node in ast.walk(decorator):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "param"
                and _scenario_calls(node)
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                ids.add(str(node.args[0].value))
    return ids


def _marked() -> dict[str, set[str]]:
    """scenario name -> the test files that mark it."""
    found: dict[str, set[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for call in _scenario_calls(ast.parse(path.read_text(), filename=str(path))):
            assert len(call.args) == 1 and isinstance(call.args[0], ast.Constant), (
                f"{path}: a scenario marker takes one literal name"
            )
            found.setdefault(str(call.args[0].value), set()).add(str(path.relative_to(REPO)))
    return found


def test_every_marker_names_a_scenario_and_every_scenario_is_marked() -> None:
    marked = _marked()
    assert set(marked) == set(SCENARIOS), (set(marked), set(SCENARIOS))


def test_every_gate_version_exists_and_stays_in_the_gate() -> None:
    for name, scenario in SCENARIOS.items():
        assert scenario.gate, f"{name}: no small version in the landing gate"
        for nodeid in scenario.gate:
            file, _, test = nodeid.partition("::")
            function, _, param = test.partition("[")
            path = REPO / file
            assert path.is_file(), f"{name}: {file} is missing"
            tree = ast.parse(path.read_text(), filename=file)
            (defined,) = [
                node
                for node in tree.body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name == function
            ] or [None]
            assert defined is not None, f"{name}: {nodeid} is not defined"
            assert param not in _scenario_params(defined) and not any(
                _is_scenario(d) for d in defined.decorator_list
            ), f"{name}: its gate version {nodeid} is itself a scenario"
            module_marks = [
                node
                for node in tree.body
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            ]
            assert not any(_scenario_calls(m) for m in module_marks), (
                f"{name}: {file} marks every test of it a scenario"
            )
            if param:
                assert repr(param.rstrip("]")) in path.read_text().replace('"', "'"), nodeid


def test_docs_list_every_scenario() -> None:
    text = (REPO / "docs" / "testing.md").read_text()
    missing = [name for name in SCENARIOS if f"`{name}`" not in text]
    assert not missing, f"docs/testing.md does not list {missing}"
