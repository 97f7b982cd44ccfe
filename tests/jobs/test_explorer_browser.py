"""The tree explorer in a real browser: headless Chromium (Debian's package, driven by
Playwright: tests/browser.py) opens the page `bgmcts report` wrote for a real run
(`explored_run`: the real SmolLM2 trees through the pipeline's records and Parquet sink),
picks a problem, opens its tree node by node down to its deepest node, and reads that
node's text, score, answer and rows as the page draws them, checked against the Parquet;
then the search box, the outcome filter and "Expand all".

This tier needs Chromium: without it the test fails and names the install script
(scripts/install-chromium.sh, `make chromium`).  The page's data itself is checked
against the Parquet in the fast tier (tests/jobs/test_explore.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from pipeline.report.explorer import OUTCOMES
from tests.browser import INSTALL, chromium_page, chromium_path

pytestmark = pytest.mark.integration


def _nodes(run: Path, problem: str) -> list[dict[str, Any]]:
    rows = [r for r in pq.read_table(run / "tree_nodes").to_pylist() if r["problem_id"] == problem]
    return sorted(rows, key=lambda r: r["node_id"])


def _deepest_problem(run: Path) -> str:
    rows = pq.read_table(run / "tree_nodes", columns=["problem_id", "depth"]).to_pylist()
    return str(max(rows, key=lambda r: r["depth"])["problem_id"])


def test_a_tree_opens_node_by_node_and_shows_the_parquet_text_score_and_rows(
    explored_run: Path,
) -> None:
    if chromium_path() is None:
        pytest.fail(f"headless Chromium is not installed: run {INSTALL} (or `make chromium`)")
    problem = _deepest_problem(explored_run)
    nodes = _nodes(explored_run, problem)
    deepest = max(nodes, key=lambda r: (r["depth"], -r["node_id"]))
    assert deepest["depth"] >= 3  # deeper than the page opens a tree by itself
    sft = {r["node_id"] for r in pq.read_table(explored_run / "sft").to_pylist()}
    with chromium_page() as page:
        page.goto((explored_run / "explorer.html").as_uri())
        page.click(f'#problems li[data-problem="{problem}"]')
        assert page.locator("#view h2").inner_text().endswith(problem)
        node = page.locator(f'li[data-node="{deepest["node_id"]}"]')
        assert node.count() == 0  # not drawn: its ancestors are closed
        # open each ancestor by its own toggle, from the root down
        path, at = [], deepest["parent_id"]
        while at is not None:
            path.insert(0, at)
            at = nodes[at]["parent_id"]
        for ancestor in path:
            toggle = page.locator(f'li[data-node="{ancestor}"] > .line > .toggle')
            if toggle.get_attribute("aria-expanded") == "false":
                toggle.click()
        assert node.count() == 1 and node.is_visible()
        _shows(node, deepest, deepest["node_id"] in sft)
        # the search box: the problems whose text holds a word of this step, and its node
        word = max(deepest["text"].split(), key=len)
        page.fill("#search", word)
        shown = page.locator("#problems li:not([hidden])")
        expected = {
            r["problem_id"]
            for r in pq.read_table(explored_run / "tree_nodes").to_pylist()
            if word.lower() in r["text"].lower()
        }
        listed = {shown.nth(i).get_attribute("data-problem") for i in range(shown.count())}
        assert problem in expected and expected <= listed
        assert "match" in (node.get_attribute("class") or "")
        page.fill("#search", "")
        # the outcome filter lists exactly the trees of that outcome
        trees = pq.read_table(explored_run / "trees").to_pylist()
        page.select_option("#outcome", "none correct")
        wanted = {t["problem_id"] for t in trees if OUTCOMES[t["difficulty"]] == "none correct"}
        shown = page.locator("#problems li:not([hidden])")
        assert {shown.nth(i).get_attribute("data-problem") for i in range(shown.count())} == wanted
        # "Expand all" draws every node of the tree
        page.click("#expand-all")
        assert page.locator("#view li.node").count() == len(nodes)


def _shows(node: Any, row: dict[str, Any], in_sft: bool) -> None:
    """The node's line and text as drawn, against its tree_nodes row."""
    text = node.locator(":scope > .text").text_content()
    assert text == row["inserted_text"] + row["text"]
    q = node.locator(":scope > .line > .q")
    assert float(q.get_attribute("data-q")) == row["q"]
    assert abs(float(q.inner_text().removeprefix("Q ")) - row["q"]) <= 0.0005
    line = node.locator(":scope > .line").inner_text()
    if row["answered"]:
        word = {True: "correct", False: "incorrect", None: "ungraded"}[row["label"]]
        assert f"answered {row['answer']}: {word}" in line
    rows = node.locator(":scope > .line > .chip.row").all_inner_texts()
    assert ("sft" in rows) == in_sft
