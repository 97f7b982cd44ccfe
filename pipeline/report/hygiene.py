"""Data hygiene of a run's training tables: what a person about to train on them checks.

Per training table (sft, dpo, step_dpo, kto, prm) and per row:

* ``after_answer``: text after the answer statement (the row goes on past its answer:
  the model's next invented problem, say) - `search.answers.answer_span` on the text;
* ``many_answers``: more than one answer statement (`answer_statements`);
* ``no_answer``: no answer statement at all (answered only by its natural end, its
  "answer" a guess at its last number);
* ``truncated``: the node the text ends at was cut by the token cap inside its answer
  sentence (the ``nodes`` table's ``truncated``);
* ``prompts``: the problem has more than one user turn across the tables;
* ``states_reference``: a rejected (dpo, step_dpo) or undesirable (kto) text states the
  reference answer (math-verify, as grading does);
* ``prm_rebuild``: a prm row whose steps, joined by its separator, are not the text of
  its answered node's sft/kto completion, or a step that contains the separator;
* ``kto_label``: a kto label that disagrees with the node's grade in ``nodes``, or a kto
  row of a node that ``nodes`` holds as ungraded (a null label: its comparison with the
  reference was cut off, so it is neither desirable nor undesirable).

A row with any of them is *dirty*; `hygiene` counts per table and in all.  It reads
whatever a run wrote, old schemas included (a table without an optional column is checked
for what it has), so the same numbers come out for runs before and after a change.

`hygiene_of_run` first reads every table of the run (all nine record types) against its
declared schema (`pipeline.records.conformance`), part by part, and counts two more:

* ``wrong_type``: every row of a part with a column not of its declared type's kind (a
  ``label`` stored as the string "false", a text where a list of messages belongs), or a
  column the schema does not declare stored with another type than in the sibling parts
  (the majority's type wins);
* ``null_required``: a row with a null where the schema says never (a ``problem_id``, a
  ``completion``, a message's content).

Such rows are dirty and take no part in the other checks (their values cannot be
trusted); each problem is listed under the table, naming the table, the part and the
column (`SchemaProblem`).

"Clean" must mean every committed row was checked, so `hygiene_of_run` refuses, with an
`InputError` naming it, a run it cannot read whole: a part a commit marker names that is
not there (readers would skip its batch without a word), a part that is no readable
Parquet (`pipeline.store.parts.UnreadablePart`), or a part without a column of `NEEDED`.
What a run is expected to hold is what its own markers say it committed: the sink writes
no part for a table a batch has no rows of, so a run with no dpo pairs has no dpo parts,
names none, and is checked like any other.

`bgmcts check <run folder>` (`jobs/check.py`) prints it for a run, ``dirty_rows=<int>`` last.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from common.grading import answers_match
from pipeline.errors import InputError
from pipeline.records import RECORD_TYPES, SCHEMAS
from pipeline.records.conformance import misfits, null_rows, schema_with
from search.answers import AnswerExtraction, answer_span, answer_statements, stated_answers

CHECKS = (
    "after_answer",
    "many_answers",
    "no_answer",
    "truncated",
    "prompts",
    "states_reference",
    "prm_rebuild",
    "kto_label",
    "wrong_type",
    "null_required",
)
TABLES = ("sft", "dpo", "step_dpo", "kto", "prm")
# The tables whose rows the content checks read (the training tables, and nodes and trees
# for the grades, truncation and references); the others are read for their schema only.
CONTENT_TABLES = (*TABLES, "nodes", "trees")
# Columns an older run wrote under another name, with the type they had then.
LEGACY_FIELDS: dict[str, tuple[pa.Field, ...]] = {
    "dpo": (pa.field("node_id", pa.int64(), nullable=False),),
    "step_dpo": (pa.field("node_id", pa.int64(), nullable=False),),
}
# The columns the checks read with no fallback, per table read (each a tuple of names, any
# one of which will do: an older dpo or step_dpo row named its chosen node `node_id`).
# Every other column they read is optional, absent from runs written before it existed.
NEEDED: dict[str, tuple[tuple[str, ...], ...]] = {
    "sft": (("problem_id",), ("prompt",), ("completion",), ("node_id",)),
    "dpo": (
        ("problem_id",),
        ("prompt",),
        ("chosen",),
        ("rejected",),
        ("chosen_node_id", "node_id"),
    ),
    "step_dpo": (
        ("problem_id",),
        ("prompt",),
        ("full_chosen",),
        ("full_rejected",),
        ("chosen_node_id", "node_id"),
    ),
    "kto": (("problem_id",), ("prompt",), ("completion",), ("label",), ("node_id",)),
    "prm": (("problem_id",), ("prompt",), ("completions",), ("node_id",)),
    "nodes": (("problem_id",), ("node_id",), ("label",)),
    "trees": (("problem_id",),),
}
Row = Mapping[str, Any]


@dataclass
class TableHygiene:
    rows: int = 0
    dirty: int = 0
    checks: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class SchemaProblem:
    """A column of one part that does not hold what its schema declares."""

    table: str
    part: str  # the part's file name
    column: str
    problem: str
    rows: int  # rows of the part it makes dirty

    def line(self) -> str:
        many = "s" if self.rows != 1 else ""
        return (
            f"- table {self.table}, {self.part}, column {self.column}: {self.problem} "
            f"({self.rows} row{many} dirty)"
        )


@dataclass
class Hygiene:
    tables: dict[str, TableHygiene]
    problems: list[SchemaProblem] = field(default_factory=list)

    @property
    def dirty_rows(self) -> int:
        return sum(t.dirty for t in self.tables.values())

    def markdown(self) -> str:
        head = "| table | rows | " + " | ".join(c.replace("_", " ") for c in CHECKS)
        lines = [head + " | dirty |", "|---" * (len(CHECKS) + 3) + "|"]
        for name, t in self.tables.items():
            cells = " | ".join(str(t.checks[c]) for c in CHECKS)
            lines.append(f"| {name} | {t.rows} | {cells} | {t.dirty} |")
        if self.problems:
            lines += ["", "Parts that do not hold what their schema declares:"]
            lines += [p.line() for p in self.problems]
        return "\n".join(lines)


def _user_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m["content"]) for m in prompt if m["role"] in ("user", "system"))


def _assistant(messages: Any) -> str:
    return "".join(str(m["content"]) for m in messages)


def after_answer(text: str) -> bool:
    """Text after the answer statement (read as the last_number rule reads it, which
    takes a box first)."""
    span = answer_span(text, AnswerExtraction.LAST_NUMBER)
    return span is not None and bool(text[span.end :].strip())


def _texts(table: str, row: Row) -> dict[str, str]:
    """The texts of one row a trainer trains on, by role."""
    if table == "sft":
        return {"good": _assistant(row["completion"])}
    if table == "dpo":
        return {"good": _assistant(row["chosen"]), "bad": _assistant(row["rejected"])}
    if table == "step_dpo":
        return {"good": row["full_chosen"], "bad": row["full_rejected"]}
    if table == "kto":
        role = "good" if row["label"] else "bad"
        return {role: _assistant(row["completion"])}
    separator = row.get("separator") or "\n"
    return {"steps": separator.join(row["completions"])}


def _trained_node(row: Row) -> int:
    """The answered node a row's trained-towards text ends at (dpo, step_dpo: the chosen)."""
    return int(row["chosen_node_id"] if "chosen_node_id" in row else row["node_id"])


async def hygiene(
    tables: Mapping[str, Sequence[Row]],
    nodes: Iterable[Row] = (),
    trees: Iterable[Row] = (),
    timeout_s: float = 5.0,
) -> Hygiene:
    """The checks of the module docstring over a run's rows (each table a list of dicts)."""
    node_info = {(str(n["problem_id"]), int(n["node_id"])): n for n in nodes}
    references = {str(t["problem_id"]): t.get("reference") for t in trees}
    prompts: defaultdict[str, set[str]] = defaultdict(set)
    completions: dict[tuple[str, int], str] = {}
    for name in TABLES:
        for row in tables.get(name, ()):
            prompts[str(row["problem_id"])].add(_user_text(row["prompt"]))
            if name in ("sft", "kto"):
                key = (str(row["problem_id"]), int(row["node_id"]))
                completions[key] = _assistant(row["completion"])
    verdicts: dict[tuple[str, str], bool] = {}

    async def says(answer: str, reference: str) -> bool:
        key = (answer, reference)
        if key not in verdicts:
            verdicts[key] = await answers_match(answer, reference, timeout_s)
        return verdicts[key]

    result: dict[str, TableHygiene] = {}
    for name in TABLES:
        table = TableHygiene()
        for row in tables.get(name, ()):
            problem = str(row["problem_id"])
            found: set[str] = set()
            texts = _texts(name, row)
            trained = [t for role, t in texts.items() if role != "steps"] or list(texts.values())
            if any(after_answer(t) for t in trained):
                found.add("after_answer")
            if any(len(answer_statements(t)) > 1 for t in trained):
                found.add("many_answers")
            if row.get("ends_in_answer", True) and any(not answer_statements(t) for t in trained):
                found.add("no_answer")
            if node_info.get((problem, _trained_node(row)), {}).get("truncated"):
                found.add("truncated")
            if len(prompts[problem]) > 1:
                found.add("prompts")
            reference = row.get("reference") or references.get(problem)
            if reference and "bad" in texts:
                stated = stated_answers(texts["bad"], AnswerExtraction.LAST_NUMBER)
                if any([await says(a, str(reference)) for a in stated]):
                    found.add("states_reference")
            if name == "prm":
                separator = row.get("separator") or "\n"
                steps = list(row["completions"])
                completion = completions.get((problem, int(row["node_id"])))
                if any(separator in s for s in steps) or (
                    completion is not None and separator.join(steps) != completion
                ):
                    found.add("prm_rebuild")
            if name == "kto":
                node = node_info.get((problem, int(row["node_id"])))
                if node is not None and (
                    node["label"] is None or bool(node["label"]) != bool(row["label"])
                ):
                    found.add("kto_label")
            table.rows += 1
            table.checks.update(found)
            table.dirty += bool(found)
        result[name] = table
    return Hygiene(result)


@dataclass
class _Part:
    """One part as read: its name, stored schema, rows (content tables) and row count."""

    name: str
    schema: pa.Schema
    rows: list[dict[str, Any]]
    count: int


@dataclass
class _Read:
    """A table's rows fit for the content checks, and what its schema check found."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0  # rows fit for the checks (the schema-only tables keep no rows)
    flagged: TableHygiene = field(default_factory=TableHygiene)
    problems: list[SchemaProblem] = field(default_factory=list)

    def flag(self, check: str, count: int) -> None:
        self.flagged.rows += count
        self.flagged.dirty += count
        self.flagged.checks[check] += count


def _read_table(run: Any, kind: str) -> _Read:
    """Every counted part of `kind`, checked against its declared schema (module
    docstring); raises `InputError` for a part without a column of `NEEDED`."""
    declared = schema_with(SCHEMAS[kind], LEGACY_FIELDS.get(kind, ()))
    result = _Read()
    parts: list[_Part] = []
    for path in run.parts(kind):
        table = run.read_part(path)  # the rows that count (`RunFolder.read_part`)
        name = str(path).rsplit("/", 1)[-1]
        for names in NEEDED.get(kind, ()):
            if not set(names) & set(table.column_names):
                raise InputError(
                    f"{run.location}: table {kind}: {name} has no column {' or '.join(names)}"
                )
        wrong = misfits(declared, table.schema)
        if wrong:
            result.problems += [
                SchemaProblem(kind, name, m.column, m.describe(), table.num_rows) for m in wrong
            ]
            result.flag("wrong_type", table.num_rows)
            continue
        nulls = null_rows(table, declared)
        if nulls:
            bad = np.logical_or.reduce(list(nulls.values()))
            for column, rows in nulls.items():
                first = int(np.flatnonzero(rows)[0])
                problem = f"null where the schema says never (first at row {first})"
                result.problems.append(SchemaProblem(kind, name, column, problem, int(rows.sum())))
            result.flag("null_required", int(bad.sum()))
            table = table.filter(pa.array(~bad))
        rows = table.to_pylist() if kind in CONTENT_TABLES else []
        parts.append(_Part(name, table.schema, rows, table.num_rows))
    for part in _odd_siblings(kind, parts, declared, result):
        parts.remove(part)
    result.rows = [row for part in parts for row in part.rows]
    result.count = sum(part.count for part in parts)
    return result


def _odd_siblings(kind: str, parts: list[_Part], declared: pa.Schema, result: _Read) -> list[_Part]:
    """Parts that store a column the schema does not declare with another type than the
    most of their siblings do (flagged `wrong_type` in `result`): the same table's column
    means one thing, whatever part a row lies in."""
    types: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for part in parts:
        for f in part.schema:
            if f.name not in declared.names:
                types[f.name][str(f.type)] += 1
    odd: list[_Part] = []
    for column, counts in sorted(types.items()):
        if len(counts) < 2:
            continue
        usual, _ = counts.most_common(1)[0]
        for part in parts:
            if column in part.schema.names and str(part.schema.field(column).type) != usual:
                stored = part.schema.field(column).type
                others = sum(n for t, n in counts.items() if t == usual)
                problem = f"stored as {stored}, as {usual} in {others} other part(s)"
                result.problems.append(SchemaProblem(kind, part.name, column, problem, part.count))
                if part not in odd:
                    odd.append(part)
                    result.flag("wrong_type", part.count)
    return odd


def hygiene_of_run(run: Any, timeout_s: float = 5.0) -> Hygiene:
    """`hygiene` of a `pipeline.store.run_folder.RunFolder` (reads its committed tables
    with the schema each file was written with, so older runs read too), every table
    checked against its declared schema first (module docstring).

    Raises `InputError`, one line naming the table and the part or column, when the run
    cannot be read whole (module docstring)."""
    missing = run.missing_parts()
    if missing:
        named = "; ".join(
            f"table {kind}: {len(parts)} committed part{'s' if len(parts) > 1 else ''} "
            f"missing ({parts[0]}{', ...' if len(parts) > 1 else ''})"
            for kind, parts in sorted(missing.items())
        )
        raise InputError(f"{run.location}: cannot be read whole: {named}")
    kinds = [*TABLES, *(k for k in RECORD_TYPES if k not in TABLES)]
    read = {kind: _read_table(run, kind) for kind in kinds}
    tables = {name: read[name].rows for name in TABLES}
    report = asyncio.run(hygiene(tables, read["nodes"].rows, read["trees"].rows, timeout_s))
    merged: dict[str, TableHygiene] = {}
    for kind in kinds:
        table = report.tables.get(kind, TableHygiene())
        if kind not in TABLES:  # the schema-only tables: every row read is counted
            table.rows = read[kind].count
        flagged = read[kind].flagged
        table.rows += flagged.rows
        table.dirty += flagged.dirty
        table.checks.update(flagged.checks)
        merged[kind] = table
    report.tables = merged
    report.problems = [p for kind in kinds for p in read[kind].problems]
    return report


__all__ = [
    "CHECKS",
    "CONTENT_TABLES",
    "NEEDED",
    "TABLES",
    "Hygiene",
    "SchemaProblem",
    "TableHygiene",
    "after_answer",
    "hygiene_of_run",
]
