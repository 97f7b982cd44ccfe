"""Shared by the job tests: real run folders and a tiny base model."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "smollm2_trees.jsonl"


@pytest.fixture(scope="session")
def prm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with prm rows of both splits (`tests.trl.build_run`: scripted search,
    then the pipeline's real records, grading and Parquet sink)."""
    from tests.trl.build_run import build

    return asyncio.run(build(tmp_path_factory.mktemp("prm-run")))


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer random Llama token classifier with SmolLM2's tokenizer from the GGUF."""
    pytest.importorskip("transformers")
    from tests.prm_checkpoint import write_tiny_prm

    # the usual small random weights: a base to train, not spread-out values to read
    return write_tiny_prm(
        tmp_path_factory.mktemp("tiny-base"),
        layers=1,
        hidden=16,
        positions=1024,
        initializer_range=0.02,
    )


async def _records(entry: dict[str, Any], index: int) -> dict[str, list[dict[str, Any]]]:
    from pipeline.records import RecordsConfig, RecordsSpec, records_for
    from pipeline.records.rebuild import rebuild_result
    from search.answers import AnswerExtraction

    return await records_for(
        rebuild_result(entry["nodes"], entry["tree"]),
        entry["tree"]["reference"],
        RecordsSpec(
            problem_id=f"p{index}",
            run_id="records",
            config=RecordsConfig(),
            extraction=AnswerExtraction.LAST_NUMBER,
        ),
    )


@pytest.fixture(scope="session")
def records_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of every record type: the real SmolLM2 trees of tests/fixtures
    replayed through `records_for` (math-verify grading), one `ParquetSink` batch per
    tree, so every table has sibling parts.  Copy it before changing it."""
    from pipeline.store.run_folder import RunFolder
    from pipeline.store.sink import ParquetSink

    entries = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    sink = ParquetSink(RunFolder.open(tmp_path_factory.mktemp("records-run"), "records"))
    for index, entry in enumerate(entries):
        sink.write_batch(asyncio.run(_records(entry, index)))
    run = Path(sink.run_dir)
    for table in ("sft", "kto", "nodes", "trees", "prm"):
        assert len(list((run / table).glob("*.parquet"))) > 1, table
    return run


@pytest.fixture(scope="session")
def explored_run(records_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of `records_run` with the run.json of the config it was built under (default
    records, last-number answers) and the files `bgmcts report` writes: report.md and the
    tree explorer's explorer.html.  Read it; copy it before changing it."""
    from jobs import cli

    run = tmp_path_factory.mktemp("explored") / "out" / records_run.name
    shutil.copytree(records_run, run)
    config = {"search": {"answer_extraction": "last_number"}, "records": {}}
    (run / "run.json").write_text(json.dumps({"run_id": "records", "config": config}))
    assert cli.main(["report", str(run)]) == 0
    assert (run / "report.md").is_file() and (run / "explorer.html").is_file()
    return run
