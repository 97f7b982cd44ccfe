"""The ``errors`` record: a problem (or a source) that failed, and where."""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]

from common.redact import redact_text
from pipeline.records.schema import Row, doc_field, record_schema, shared_fields

ERRORS_SCHEMA = record_schema(
    "errors",
    [
        doc_field(
            "problem_id",
            pa.string(),
            "the failed problem; null for a failure outside one",
            nullable=True,
        ),
        doc_field(
            "stage",
            pa.string(),
            "where it failed (source, search, grade, records, sink...); a night allocator's "
            "probe that failed ends in ' (probe)' (a rerun retries it but gives it no second "
            "tree: its window was allocated without it)",
        ),
        doc_field("error_type", pa.string(), "exception class name, if any", nullable=True),
        doc_field("message", pa.string(), "the error message"),
        *shared_fields("run_id"),
    ],
)
"""`errors`: one row per failure, so a run never loses a problem silently."""


def error_row(
    problem_id: str | None, stage: str, error: BaseException | str, *, run_id: str
) -> Row:
    """An `errors` row from an exception or a message (credentials in it redacted)."""
    if isinstance(error, BaseException):
        return {
            "problem_id": problem_id,
            "stage": stage,
            "error_type": type(error).__name__,
            "message": redact_text(error) or type(error).__name__,
            "run_id": run_id,
        }
    return {
        "problem_id": problem_id,
        "stage": stage,
        "error_type": None,
        "message": redact_text(error),
        "run_id": run_id,
    }


__all__ = ["ERRORS_SCHEMA", "error_row"]
