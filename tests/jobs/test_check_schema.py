"""`bgmcts check` reads every table against its declared schema, and a part that is no
readable Parquet is named by check, report and publish alike.

The run is real (`records_run`, tests/jobs/conftest.py): SmolLM2 trees replayed through
`records_for` and committed batch by batch by the real `ParquetSink`, so every table has
sibling parts.  Each case then rewrites one
real part the way a hostile or careless hand would (a bool column stored as strings, a
null id, a list of messages stored as text, a cut-short file) and runs the command
through `jobs.cli.main`, as `bgmcts` does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from jobs import cli
from jobs.exits import BAD_INPUT, FAILED, OK


def damaged(clean: Path, tmp_path: Path, table: str, damage: Callable[[Path], None]) -> Path:
    """A copy of the run whose last `table` part `damage` rewrote; returns the part."""
    run = tmp_path / "out" / clean.name
    shutil.copytree(clean, run)
    part = sorted((run / table).glob("*.parquet"))[-1]
    damage(part)
    return part


def retyped(column: str, type_: Any, convert: Callable[[Any], Any]) -> Callable[[Path], None]:
    def damage(part: Path) -> None:
        table = pq.read_table(part)
        values = [convert(v) for v in table.column(column).to_pylist()]
        at = table.column_names.index(column)
        pq.write_table(table.set_column(at, pa.field(column, type_), pa.array(values, type_)), part)

    return damage


def nulled(column: str, row: int = 0) -> Callable[[Path], None]:
    def damage(part: Path) -> None:
        table = pq.read_table(part)
        values = table.column(column).to_pylist()
        values[row] = None
        type_ = table.schema.field(column).type
        at = table.column_names.index(column)
        pq.write_table(table.set_column(at, pa.field(column, type_), pa.array(values, type_)), part)

    return damage


def content_nulled(column: str) -> Callable[[Path], None]:
    """A message whose content is null (the schema says never), in row 0's `column`."""

    def damage(part: Path) -> None:
        table = pq.read_table(part)
        values = table.column(column).to_pylist()
        values[0] = [dict(m, content=None) for m in values[0]]
        type_ = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
        at = table.column_names.index(column)
        pq.write_table(table.set_column(at, pa.field(column, type_), pa.array(values, type_)), part)

    return damage


def check(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["check", str(run)])
    out, err = capsys.readouterr()
    return status, out, err


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err


@pytest.mark.parametrize(
    ("table", "column", "damage", "says"),
    [
        # a bool stored as text passed with dirty_rows=0: "false" is a true value
        ("kto", "label", retyped("label", pa.string(), lambda v: str(v).lower()), "string"),
        ("kto", "label", retyped("label", pa.int64(), int), "int64"),
        ("nodes", "label", retyped("label", pa.string(), lambda v: str(v).lower()), "string"),
        # these were a TypeError, exit 1, with no dirty_rows= line and no column named
        ("sft", "completion", retyped("completion", pa.string(), lambda v: v[0]["content"]), ""),
        ("sft", "node_id", retyped("node_id", pa.string(), str), "string"),
        ("prm", "completions", retyped("completions", pa.string(), "\n".join), "string"),
        ("prm", "labels", retyped("labels", pa.list_(pa.int64()), lambda v: list(map(int, v))), ""),
        ("trees", "problem_id", retyped("problem_id", pa.int64(), lambda v: 7), "int64"),
        ("sft", "problem_id", nulled("problem_id"), "null"),
        ("sft", "completion", nulled("completion"), "null"),
        ("sft", "prompt", nulled("prompt"), "null"),
        ("sft", "node_id", nulled("node_id"), "null"),
        ("sft", "score", nulled("score"), "null"),
        ("kto", "label", nulled("label"), "null"),
        ("dpo", "chosen_node_id", nulled("chosen_node_id"), "null"),
        ("step_dpo", "full_chosen", nulled("full_chosen"), "null"),
        ("sft", "completion", content_nulled("completion"), "null"),
        ("tree_nodes", "problem_id", nulled("problem_id"), "null"),
        ("nodes", "trajectory", nulled("trajectory"), "null"),
    ],
)
def test_a_column_of_the_wrong_type_or_a_forbidden_null_is_a_dirty_row_named(
    records_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    table: str,
    column: str,
    damage: Callable[[Path], None],
    says: str,
) -> None:
    part = damaged(records_run, tmp_path, table, damage)
    status, out, err = check(part.parents[1], capsys)
    assert status == FAILED, (out, err)
    no_traceback(err)
    last = out.splitlines()[-1]
    assert last.startswith("dirty_rows=") and int(last.removeprefix("dirty_rows=")) > 0, out
    named = [line for line in out.splitlines() if line.startswith(f"- table {table}, ")]
    assert len(named) == 1, out
    assert f"{part.name}, column {column}: " in named[0] and says in named[0], named[0]
    row = next(line for line in out.splitlines() if line.startswith(f"| {table} |"))
    assert not row.endswith("| 0 |"), row  # the table's own line counts the dirty rows


def test_a_column_the_schema_does_not_declare_is_held_to_its_siblings_type(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def note(part: Path) -> None:
        for i, each in enumerate(sorted(part.parent.glob("*.parquet"))):
            table = pq.read_table(each)
            values = [i] * table.num_rows if i else ["x"] * table.num_rows
            pq.write_table(table.append_column("note", pa.array(values)), each)

    part = damaged(records_run, tmp_path, "sft", note)
    first = sorted(part.parent.glob("*.parquet"))[0]
    status, out, err = check(part.parents[1], capsys)
    assert status == FAILED, (out, err)
    assert f"- table sft, {first.name}, column note: stored as string, as int64 in " in out
    assert out.splitlines()[-1] != "dirty_rows=0"


def test_an_empty_part_of_the_wrong_schema_still_fails(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # no row is dirty, but a trainer loading the table trips over the odd part's schema
    def emptied(part: Path) -> None:
        table = pq.read_table(part).slice(0, 0)
        at = table.column_names.index("label")
        pq.write_table(table.set_column(at, "label", pa.array([], pa.string())), part)

    part = damaged(records_run, tmp_path, "kto", emptied)
    status, out, _ = check(part.parents[1], capsys)
    assert status == FAILED
    assert f"- table kto, {part.name}, column label: stored as string" in out


@pytest.mark.parametrize(
    "damage",
    [
        retyped("node_id", pa.int32(), int),  # what another Parquet writer makes of an id
        retyped("problem_id", pa.large_string(), str),
        retyped("score", pa.float32(), float),
    ],
)
def test_the_same_values_in_a_narrower_or_wider_type_are_clean(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any
) -> None:
    part = damaged(records_run, tmp_path, "sft", damage)
    status, out, err = check(part.parents[1], capsys)
    assert status == OK, (out, err)
    assert out.splitlines()[-1] == "dirty_rows=0"


def _cut(part: Path) -> None:
    body = part.read_bytes()
    part.write_bytes(body[: len(body) // 2])


def _inside(part: Path) -> None:
    # the footer intact, a data page scrambled: found only when the page is read
    body = bytearray(part.read_bytes())
    body[100:400] = bytes(b ^ 0xFF for b in body[100:400])
    part.write_bytes(bytes(body))


CORRUPTIONS = {
    "not parquet": lambda part: part.write_bytes(b"not parquet"),
    "cut short": _cut,
    "empty file": lambda part: part.write_bytes(b""),
    "damaged page": _inside,
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
@pytest.mark.parametrize("command", ["check", "report", "publish"])
def test_a_part_that_is_no_readable_parquet_is_named_with_exit_2(
    records_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    how: str,
) -> None:
    # report gave a bare ArrowInvalid or OSError naming no file (exit 1), publish
    # "Parquet magic bytes not found" or "Cannot split sft: ..." with a retry command
    table = "trees" if command == "report" else "sft"
    part = damaged(records_run, tmp_path, table, CORRUPTIONS[how])
    run = part.parents[1]
    monkeypatch.setenv("HF_TOKEN", "hf_unused")
    argv = {
        "check": ["check", str(run)],
        "report": ["report", str(run)],
        # nothing listens there: the part must be refused before any upload is tried
        "publish": ["publish", "--run-dir", str(run), "--repo", "org/name"],
    }[command]
    if command == "publish":
        argv += ["--endpoint", "http://127.0.0.1:9"]
    capsys.readouterr()
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == BAD_INPUT, (out, err)
    no_traceback(err)
    assert err.startswith(f"error: {run}: table {table}: {part.name} cannot be read ("), err


def test_a_compacted_runs_damaged_shard_is_named(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    assert cli.main(["compact", "--run-dir", str(run)]) == OK
    shard = sorted((run / "kto").glob("part-compact-*.parquet"))[0]
    retyped("label", pa.string(), lambda v: str(v).lower())(shard)
    status, out, _ = check(run, capsys)
    assert status == FAILED
    assert f"- table kto, {shard.name}, column label: stored as string" in out
    _cut(shard)
    status, _, err = check(run, capsys)
    assert status == BAD_INPUT
    assert err.startswith(f"error: {run}: table kto: {shard.name} cannot be read ("), err


def test_a_null_in_a_column_a_report_reads_names_the_part_and_column(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # was "TypeError: int() argument must be ... not 'NoneType'", exit 1
    part = damaged(records_run, tmp_path, "trees", nulled("policy_output_tokens"))
    capsys.readouterr()
    status = cli.main(["report", str(part.parents[1])])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    assert err == (
        f"error: {part.parents[1]}: table trees: {part.name}: column policy_output_tokens "
        "holds 1 null(s) where the schema says never\n"
    )


@pytest.mark.parametrize("command", ["check", "report"])
def test_a_damaged_compaction_record_is_named_not_read_as_an_empty_run(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # read as "counts for nothing", it hid every shard: check said dirty_rows=0 over
    # 0 rows, exit 0, and report wrote a report of no trees
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    assert cli.main(["compact", "--run-dir", str(run)]) == OK
    record = next((run / "_compacted").glob("*.json"))
    record.write_text('{"shards": ["compact-')  # cut short
    capsys.readouterr()
    status = cli.main([command, str(run)])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    no_traceback(err)
    assert err.startswith(f"error: {run}: _compacted/{record.name} is no compaction record")


def test_a_commit_marker_with_a_field_of_the_wrong_type_is_named(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # was "error: invalid literal for int() with base 10: 'x'", naming no file
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    marker = sorted((run / "_committed").iterdir())[0]
    body = json.loads(marker.read_text())
    marker.write_text(json.dumps(dict(body, generation="x")))
    status, _, err = check(run, capsys)
    assert status == BAD_INPUT
    no_traceback(err)
    assert err.startswith(f"error: {run}: _committed/{marker.name} cannot be read ("), err


@pytest.mark.parametrize(
    ("manifest", "named"),
    [
        ("{cut short", "run.json: not valid JSON ("),
        ('{"config": [1, 2]}', "run.json: config is list, not a mapping"),
        ('{"config": {"prices": "cheap"}}', "run.json: config.prices is not a mapping"),
        ('{"config": {"scorer": "genprm"}}', "run.json: config.scorer is not a mapping"),
        (
            '{"config": {"prices": {"policy_output": "abc"}}}',
            "run.json: config.prices: policy_output: ",
        ),
    ],
)
def test_a_manifest_report_cannot_read_is_named_with_exit_2(
    records_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    manifest: str,
    named: str,
) -> None:
    # were exit 1: "ValueError: ...", "AttributeError: 'list' object has no attribute
    # 'get'", "ValidationError: 1 validation error for PricesConfig"
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    (run / "run.json").write_text(manifest)
    capsys.readouterr()
    status = cli.main(["report", str(run)])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    no_traceback(err)
    assert err.startswith(f"error: {run}/{named}"), err
