"""`bgmcts explore` (and `bgmcts report`, which writes the same page): the tree explorer.

The run is real (`explored_run`, tests/jobs/conftest.py: the real SmolLM2 trees through
the pipeline's records, grading and Parquet sink, then `bgmcts report`).  The page's data
is checked against the run's Parquet: every node's text, Q and subtree size, the rows
per table and on which nodes they sit, the outcome, and the candidate each gate kept out,
counted per gate as the tree stored them.  The browser half is
tests/jobs/test_explorer_browser.py.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from jobs import cli
from jobs.exits import BAD_INPUT, OK
from pipeline.report.explorer import OUTCOMES, TABLES, page_data, render_html

MB = 1_000_000


def _rows(run: Path, table: str) -> list[dict[str, Any]]:
    return pq.read_table(run / table).to_pylist()


def _by_problem(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[row["problem_id"]].append(row)
    return out


def test_the_page_holds_every_node_and_row_of_the_parquet(explored_run: Path) -> None:
    page = (explored_run / "explorer.html").read_text()
    data = page_data(page)
    trees = {t["problem_id"]: t for t in _rows(explored_run, "trees")}
    nodes = _by_problem(_rows(explored_run, "tree_nodes"))
    tables = {name: _by_problem(_rows(explored_run, name)) for name in TABLES}
    assert data["run"] == "records" and data["tables"] == list(TABLES)
    assert sorted(p["id"] for p in data["problems"]) == sorted(trees)
    for p in data["problems"]:
        tree, stored = trees[p["id"]], sorted(nodes[p["id"]], key=lambda r: r["node_id"])
        assert p["outcome"] == OUTCOMES[tree["difficulty"]]
        assert p["text"] == [r["text"] for r in stored]  # each node's own step, once
        assert p["ins"] == [r["inserted_text"] for r in stored]
        assert p["q"] == [r["q"] for r in stored]
        assert p["parent"] == [r["parent_id"] for r in stored]
        assert p["label"] == [None if r["label"] is None else int(r["label"]) for r in stored]
        for i, size in enumerate(p["n"]):  # N: the node and every node below it
            below = {i}
            for r in stored:
                if r["parent_id"] in below:
                    below.add(r["node_id"])
            assert size == len(below), (p["id"], i)
        assert p["rows"] == {name: len(tables[name].get(p["id"], [])) for name in TABLES}
        _rows_sit_on_their_nodes(p, tables)
        _drops_are_the_stored_counts(p, tree)
    assert len(page.encode()) < 5 * MB


def _rows_sit_on_their_nodes(p: dict[str, Any], tables: dict[str, Any]) -> None:
    on = Counter(
        (int(node), table, role, partner)
        for node, entries in p["nodeRows"].items()
        for table, role, partner in entries
    )
    expected: Counter[tuple[int, str, str, int | None]] = Counter()
    for table in ("sft", "prm"):
        expected.update((r["node_id"], table, "", None) for r in tables[table].get(p["id"], []))
    for r in tables["kto"].get(p["id"], []):
        expected[(r["node_id"], "kto", "desirable" if r["label"] else "undesirable", None)] += 1
    for table in ("dpo", "step_dpo"):
        for r in tables[table].get(p["id"], []):
            chosen, rejected = r["chosen_node_id"], r["rejected_node_id"]
            expected[(chosen, table, "chosen", rejected)] += 1
            expected[(rejected, table, "rejected", chosen)] += 1
    assert on == expected, p["id"]


def _drops_are_the_stored_counts(p: dict[str, Any], tree: dict[str, Any]) -> None:
    # the rebuild under run.json's config gave every tree's stored counts back
    assert "dropsNote" not in p, p["dropsNote"]
    counted: Counter[str] = Counter()
    for node, entries in p["nodeDrops"].items():
        for gate, partner, side in entries:
            assert 0 < int(node) < len(p["parent"])
            if side == "rejected":  # a pair is shown on both its nodes, counted once
                assert [gate, int(node), "chosen"] in p["nodeDrops"][str(partner)]
            else:
                counted[gate] += 1
    assert counted == Counter({d["gate"]: d["dropped"] for d in tree["gate_drops"]})
    assert p["gates"] == {d["gate"]: d["dropped"] for d in tree["gate_drops"]}


def test_the_page_fetches_nothing_and_explore_writes_what_report_wrote(
    explored_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (explored_run / "explorer.html").read_text()
    start = page.index('id="explorer-data">')
    shell = page[:start] + page[page.index("</script>", start) :]
    # no file, script, style or font from anywhere: the page is whole on its own
    for fetch in ("http:", "https:", "src=", "<link", "@import", "url(", "fetch(", "//cdn"):
        assert fetch not in shell, fetch
    out = tmp_path / "page.html"
    capsys.readouterr()
    assert cli.main(["explore", str(explored_run), "--output", str(out)]) == OK
    assert capsys.readouterr().out.startswith(f"explorer: {out} (0.")
    assert out.read_bytes() == (explored_run / "explorer.html").read_bytes()


def test_a_node_text_that_closes_the_script_tag_stays_data() -> None:
    text = 'x </script><script>alert("no")</script> <!-- y'
    page = render_html({"problems": [{"text": [text]}]})
    assert "alert" not in page.split('id="explorer-data">', 1)[0]
    assert page.count("</script>") == 2  # the data tag's and the code's own
    assert page_data(page) == {"problems": [{"text": [text]}]}


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out" / run.name
    shutil.copytree(run, copy)
    return copy


def _explore(run: Path | str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    status = cli.main(["explore", str(run)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return status, err


def test_what_is_no_run_or_a_damaged_one_is_named_in_one_line_with_exit_2(
    explored_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = _explore(tmp_path / "nowhere", capsys)
    assert status == BAD_INPUT and "is not a run folder" in err, err
    # a tree_nodes part that is no Parquet: the table and the part
    run = _copy(explored_run, tmp_path)
    part = sorted((run / "tree_nodes").glob("*.parquet"))[-1]
    part.write_bytes(b"not parquet")
    status, err = _explore(run, capsys)
    assert status == BAD_INPUT
    assert err.startswith(f"error: {run}: table tree_nodes: {part.name} cannot be read ("), err
    # a tree whose nodes lost one (a part of another writer, a hand edit): the problem
    shutil.rmtree(run)
    run = _copy(explored_run, tmp_path)
    part = sorted((run / "tree_nodes").glob("*.parquet"))[0]
    table = pq.read_table(part)
    problem = table.column("problem_id")[0].as_py()
    pq.write_table(table.filter(pa.compute.not_equal(table.column("node_id"), 1)), part)
    status, err = _explore(run, capsys)
    assert status == BAD_INPUT
    assert err.startswith(f"error: {run}: table tree_nodes: problem {problem!r} has node ids")
    # run.json whose records config cannot be: the file and the field
    shutil.rmtree(run)
    run = _copy(explored_run, tmp_path)
    (run / "run.json").write_text(json.dumps({"config": {"records": {"dedupe": "sometimes"}}}))
    status, err = _explore(run, capsys)
    assert status == BAD_INPUT and re.search(r"run\.json.*dedupe", err), err
