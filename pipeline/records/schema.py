"""What every record type's schema is made of, and how rows become a checked table.

* `doc_field` / `record_schema`: a field that carries its own ``description``
  (field metadata) and a schema tagged with its record name and `SCHEMA_VERSION`;
* the fields several record types share (`RUN_ID_FIELD`, `PROBLEM_ID_FIELD`, ...)
  and the nested types (`MESSAGES_TYPE` for chat turns, `TRACE_POINT`);
* `to_table`: rows as a `pyarrow.Table` of exactly one schema, a bad row raising
  `RecordValidationError` naming the record, the field and the row;
* `schema_markdown`: a schema's fields as a Markdown table (docs/records.md is generated from them).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

Row = dict[str, Any]

# 2: sft prompt-completion, dpo pair types, prm/kto/tree_nodes; 3: rows end at their
# answer, one training prompt, split/reference/truncated/difficulty columns, step_dpo
SCHEMA_VERSION = "3"


def doc_field(name: str, type_: Any, doc: str, *, nullable: bool = False) -> Any:
    return pa.field(name, type_, nullable=nullable, metadata={"description": doc})


def record_schema(record: str, fields: list[Any]) -> Any:
    return pa.schema(fields, metadata={"record": record, "schema_version": SCHEMA_VERSION})


MESSAGE_TYPE = pa.struct(
    [
        pa.field("role", pa.string(), nullable=False),
        pa.field("content", pa.string(), nullable=False),
    ]
)
# "element" is Parquet's name for a list's item, so the schema survives a round trip unchanged
MESSAGES_TYPE = pa.list_(pa.field("element", MESSAGE_TYPE, nullable=False))

# The anytime trace of a tree; an evaluation's trace point is this one with two counts more
# (pipeline.evaluation.schema).
TRACE_POINT = pa.struct(
    [
        pa.field("c_used", pa.float64(), nullable=False),
        pa.field("any_answer", pa.bool_(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("max_depth", pa.int64(), nullable=False),
        pa.field("max_width", pa.int64(), nullable=False),
    ]
)

# One quality gate's count in `trees.gate_drops`.
GATE_DROP = pa.struct(
    [
        pa.field("gate", pa.string(), nullable=False),
        pa.field("dropped", pa.int64(), nullable=False),
    ]
)

# Fields several record types share.
RUN_ID_FIELD = doc_field(
    "run_id", pa.string(), "identifier of the synthesis run that wrote the row"
)
PROBLEM_ID_FIELD = doc_field("problem_id", pa.string(), "identifier of the problem in its source")
METHOD_FIELD = doc_field("method", pa.string(), "search algorithm (SearchResult.algorithm)")
BUDGET_FIELD = doc_field("budget", pa.float64(), "the search budget B, in cost units")
POLICY_MODEL_FIELD = doc_field("policy_model", pa.string(), "policy model name", nullable=True)
PRM_MODEL_FIELD = doc_field("prm_model", pa.string(), "scorer (PRM) model name", nullable=True)
LABEL_SOURCE_FIELD = doc_field(
    "label_source",
    pa.string(),
    "where the labels come from: reference, prm_threshold or majority",
)
REFERENCE_FIELD = doc_field(
    "reference", pa.string(), "the problem's reference answer; null without one", nullable=True
)
SPLIT_FIELD = doc_field(
    "split",
    pa.string(),
    "train or test: the problem's held-out split (records.test_fraction, hashed on the "
    "problem id; the same in every table)",
)
YIELD_COUNTS: tuple[str, ...] = ("correct_trajectories", "dpo_pairs", "step_pairs", "prm_steps")
NO_YIELD: dict[str, int] = dict.fromkeys(YIELD_COUNTS, 0)
# the four counts as columns of `trees` and `eval_trees` (the data-yield tables sum them)
YIELD_FIELDS = [
    doc_field(
        "correct_trajectories",
        pa.int64(),
        "data yield: distinct correct trajectories that pass the quality gates (no "
        "per-problem cap)",
    ),
    doc_field("dpo_pairs", pa.int64(), "data yield: DPO pairs that pass the quality gates"),
    doc_field(
        "step_pairs", pa.int64(), "data yield: step-level (step-DPO) pairs that pass the gates"
    ),
    doc_field(
        "prm_steps",
        pa.int64(),
        "data yield: PRM steps with a value known from the answers below them",
    ),
]

TRUNCATED_FIELD = doc_field(
    "truncated",
    pa.bool_(),
    "the token cap cut the trajectory inside its answer sentence (never in a training row "
    "unless gates.drop_truncated is off)",
)
DIFFICULTY_FIELD = doc_field(
    "difficulty",
    pa.string(),
    "the problem's tree: all_correct, mixed (right and wrong answers) or none_correct, "
    "over its graded answered nodes (ungraded: every answer's comparison was cut off)",
)
# The shared fields by column name: a schema lists the ones it has, in its own column order,
# with `shared_fields("problem_id", "run_id")` instead of importing each constant.
SHARED_FIELDS = {
    field.name: field
    for field in (
        RUN_ID_FIELD,
        PROBLEM_ID_FIELD,
        METHOD_FIELD,
        BUDGET_FIELD,
        POLICY_MODEL_FIELD,
        PRM_MODEL_FIELD,
        LABEL_SOURCE_FIELD,
        REFERENCE_FIELD,
        SPLIT_FIELD,
        TRUNCATED_FIELD,
        DIFFICULTY_FIELD,
    )
}


def shared_fields(*names: str) -> list[Any]:
    """The shared fields called `names`, in that order (a schema's own column order)."""
    unknown = [name for name in names if name not in SHARED_FIELDS]
    if unknown:
        raise KeyError(f"no shared field {unknown}; shared: {sorted(SHARED_FIELDS)}")
    return [SHARED_FIELDS[name] for name in names]


ANSWERS_IN_PATH_DOC = (
    "answered nodes on the root-to-node path, this one included: 1 for a clean path, "
    "more for a self-correction trace (it answered, was told to think again, answered again)"
)


def list_of(type_: Any) -> Any:
    """A list type whose items are never null, its item named "element" (as MESSAGES_TYPE)."""
    return pa.list_(pa.field("element", type_, nullable=False))


def schema_markdown(schema: Any) -> str:
    """A Markdown table of a schema's fields (name, type, nullable, description)."""
    lines = ["| field | type | nullable | description |", "|---|---|---|---|"]
    for f in schema:
        doc = (f.metadata or {}).get(b"description", b"").decode().replace("|", "\\|")
        lines.append(f"| `{f.name}` | `{f.type}` | {'yes' if f.nullable else 'no'} | {doc} |")
    return "\n".join(lines)


class RecordValidationError(ValueError):
    """A row does not fit its schema; names the record, the field and the row."""

    def __init__(self, record: str, field_name: str, row: int | None, reason: str) -> None:
        where = "" if row is None else f" (row {row})"
        super().__init__(f"{record} record: field {field_name!r}{where}: {reason}")
        self.record = record
        self.field = field_name
        self.row = row


_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def to_table(rows: Iterable[Mapping[str, Any]], schema: Any) -> Any:
    """Rows as a `pyarrow.Table` of exactly `schema`, checked field by field.

    Unknown fields, missing or null non-nullable fields, and values that do not
    convert to the field's type raise `RecordValidationError` naming the field
    and the row.  A missing nullable field is null.  Integer fields take only
    integers (pyarrow itself would truncate a float).
    """
    rows = list(rows)
    record = (schema.metadata or {}).get(b"record", b"record").decode()
    names = set(schema.names)
    for i, row in enumerate(rows):
        for key in row:
            if key not in names:
                raise RecordValidationError(record, str(key), i, "not in the schema")
    columns = []
    for f in schema:
        values = [row.get(f.name) for row in rows]
        if not f.nullable:
            for i, (row, value) in enumerate(zip(rows, values, strict=True)):
                if value is None:
                    reason = "missing" if f.name not in row else "null in a non-nullable field"
                    raise RecordValidationError(record, f.name, i, reason)
        if pa.types.is_integer(f.type):  # pyarrow would silently truncate 1.5 to 1
            for i, value in enumerate(values):
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, numbers.Integral)
                ):
                    raise RecordValidationError(record, f.name, i, f"{value!r:.80} is not {f.type}")
        try:
            columns.append(pa.array(values, type=f.type))
        except _ARROW_ERRORS as exc:
            for i, value in enumerate(values):
                try:
                    pa.array([value], type=f.type)
                except _ARROW_ERRORS as one:
                    raise RecordValidationError(
                        record, f.name, i, f"{value!r:.80} is not {f.type}: {one}"
                    ) from one
            raise RecordValidationError(record, f.name, None, str(exc)) from exc
    return pa.Table.from_arrays(columns, schema=schema)


__all__ = [
    "ANSWERS_IN_PATH_DOC",
    "BUDGET_FIELD",
    "DIFFICULTY_FIELD",
    "GATE_DROP",
    "LABEL_SOURCE_FIELD",
    "MESSAGES_TYPE",
    "MESSAGE_TYPE",
    "METHOD_FIELD",
    "NO_YIELD",
    "POLICY_MODEL_FIELD",
    "PRM_MODEL_FIELD",
    "PROBLEM_ID_FIELD",
    "REFERENCE_FIELD",
    "RUN_ID_FIELD",
    "SCHEMA_VERSION",
    "SHARED_FIELDS",
    "SPLIT_FIELD",
    "TRACE_POINT",
    "TRUNCATED_FIELD",
    "YIELD_COUNTS",
    "YIELD_FIELDS",
    "RecordValidationError",
    "Row",
    "doc_field",
    "list_of",
    "record_schema",
    "schema_markdown",
    "shared_fields",
    "to_table",
]
