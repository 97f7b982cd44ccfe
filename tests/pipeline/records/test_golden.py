"""Every row the records builders build is the row they built when the golden file was
written (`tests.pipeline.records.golden`): a refactor that means to change no row proves it."""

from __future__ import annotations

import json

from tests.pipeline.records.golden import GOLDEN, differences, fingerprints


def test_every_row_matches_the_golden_fingerprints() -> None:
    expected = json.loads(GOLDEN.read_text())
    diff = differences(expected, fingerprints())
    assert not diff, f"{len(diff)} differences (first 40):\n" + "\n".join(diff[:40])


def test_the_comparison_names_the_case_the_record_and_the_row() -> None:
    golden = {
        "c": {
            "yields": {"dpo_pairs": 1},
            "sha256": {"sft": "a", "dpo": "b"},
            "rows": {"sft": ["1", "2"], "dpo": ["3"]},
        }
    }
    changed = json.loads(json.dumps(golden))
    changed["c"]["sha256"]["sft"] = "x"
    changed["c"]["rows"]["sft"] = ["1", "9", "4"]
    changed["c"]["yields"]["dpo_pairs"] = 2
    changed["d"] = golden["c"]
    assert differences(golden, golden) == []
    assert differences(golden, changed) == [
        "d: case not in the golden file",
        "c: yields {'dpo_pairs': 2} != {'dpo_pairs': 1}",
        "c: sft: 3 rows (golden 2), rows [1, 2] differ",
    ]
