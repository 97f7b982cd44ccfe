"""A problem's two trees under the night allocator (a probe, then a second tree) in the run
folder: both count when two generations committed them (a night killed between the
probe and the second tree), a stale holder's late second tree does not double it, and
compaction keeps exactly the rows that count.

The rows are real records (SmolLM2 trees from tests/fixtures replayed through
`records_for`), committed by the real `commit_batch` on a local folder.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.records import RECORD_TYPES
from pipeline.store.compaction import compact_run
from pipeline.store.run_folder import Batch, RunFolder, tree_key
from pipeline.store.sink import ParquetSink
from tests.pipeline.store.test_compaction import _records, _rows, _write


def _tree(problem_id: str, index: int, tree: str | None) -> dict[str, list[dict[str, Any]]]:
    records = _records(problem_id, index)
    records["trees"] = [dict(row, tree=tree) for row in records["trees"]]
    return records


def _counted(folder: RunFolder) -> dict[str, Counter[str]]:
    return {
        kind: Counter(folder.read(kind).column("problem_id").to_pylist()) for kind in RECORD_TYPES
    }


def test_a_probe_and_a_second_tree_of_two_generations_both_count(tmp_path: Path) -> None:
    folder = RunFolder.open(tmp_path / "out", "r")
    ParquetSink(folder)
    probe, second = _tree("p1", 0, "probe"), _tree("p1", 1, "second")
    _write(folder, probe, 1)  # the killed night committed the probe ...
    _write(folder, second, 2)  # ... the rerun the second tree
    _write(folder, _tree("p2", 2, "second"), 2)  # p2's second tree, twice: a stale holder's
    _write(folder, _tree("p2", 3, "second"), 1)  # late one does not count
    _write(folder, _tree("p2", 0, "probe"), 1)
    _write(folder, _records("p3", 3), 1)  # a tree without the allocator, as before
    counted = _counted(folder)
    assert counted["trees"] == Counter({"p1": 2, "p2": 2, "p3": 1})
    nodes = {
        "p1": len(probe["nodes"]) + len(second["nodes"]),
        "p2": len(_records("p2", 0)["nodes"]) + len(_records("p2", 2)["nodes"]),
        "p3": len(_records("p3", 3)["nodes"]),
    }
    assert dict(counted["nodes"]) == nodes
    trees = folder.read("trees").to_pylist()
    assert sorted((t["problem_id"], t["tree"]) for t in trees) == [
        ("p1", "probe"),
        ("p1", "second"),
        ("p2", "probe"),
        ("p2", "second"),
        ("p3", None),
    ]
    assert folder.done_problem_ids() == {"p1", "p2", "p3"}
    markers = [info for info in folder.batches().values() if info.second]
    assert {k for info in markers for k in info.done} == {tree_key("p1", True), "p2\x1fsecond"}

    before = {kind: _rows(folder.read(kind)) for kind in RECORD_TYPES}
    compact_run(folder)
    after = RunFolder.open(tmp_path / "out", "r")
    assert {kind: _rows(after.read(kind)) for kind in RECORD_TYPES} == before
    # a rerun commits next to the shards: p1's second tree again (a stale generation 1)
    # counts for nothing, p4's probe counts
    _write(after, _tree("p1", 3, "second"), 1)
    _write(after, _tree("p4", 1, "probe"), 3)
    again = RunFolder.open(tmp_path / "out", "r")
    assert _counted(again)["nodes"]["p1"] == nodes["p1"]
    assert _counted(again)["trees"] == Counter({"p1": 2, "p2": 2, "p3": 1, "p4": 1})


def test_the_marker_of_a_second_tree_keys_its_problem_apart() -> None:
    from pipeline.records import SCHEMAS, to_table

    tables = {k: to_table(v, SCHEMAS[k]) for k, v in _tree("p1", 0, "second").items()}
    marker = Batch.of(tables, 2)
    assert marker.problems == marker.done == {tree_key("p1", True)} and marker.second
    probe = {k: to_table(v, SCHEMAS[k]) for k, v in _tree("p1", 0, "probe").items()}
    assert Batch.of(probe, 2).problems == {"p1"} and not Batch.of(probe, 2).second
