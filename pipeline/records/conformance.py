"""Does a table read back from Parquet hold what its record type's schema declares?

A run's parts are written through `to_table`, so they fit their schema; a part copied in
by hand, rewritten by another tool or damaged may not, and a reader that trusts the
types then fails deep inside (a string where a list of messages should be) or, worse,
reads nonsense without a word (the string "false" is a true value).  Two questions, each
answered per column so a message can name it:

* `misfits`: columns whose type is not of the declared type's kind.  Kinds, not exact
  types: an int32 id, a large string or a dictionary-encoded text is what another Parquet
  writer makes of the same values and reads the same; a string label, a text where a list
  of messages belongs or a struct without a declared field is not.  A column of Arrow's
  null type (all values null) fits any type; its nulls are `null_rows`'s concern;
* `null_rows`: per column, the rows holding a null where the schema says never, nested
  ones included (a message whose content is null).  Only columns the table has are
  asked: a column missing from an older part is that older schema, not a null.

Columns the schema does not declare are not asked (older or newer runs may carry them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]


@dataclass(frozen=True)
class Misfit:
    """A column whose stored type is not of its declared type's kind."""

    column: str
    stored: str
    declared: str

    def describe(self) -> str:
        return f"stored as {self.stored}, the schema says {self.declared}"


def _strings(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or _is(t, "string_view"))


def _is(t: pa.DataType, name: str) -> bool:
    check = getattr(pa.types, f"is_{name}", None)
    return bool(check is not None and check(t))


def _lists(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or _is(t, "list_view")
        or _is(t, "large_list_view")
    )


def fits(stored: pa.DataType, declared: pa.DataType) -> bool:
    """Is `stored` of the kind of `declared` (module docstring)?"""
    if stored.equals(declared) or pa.types.is_null(stored):
        return True
    if pa.types.is_dictionary(stored):
        return fits(stored.value_type, declared)
    if pa.types.is_integer(declared):
        return bool(pa.types.is_integer(stored))
    if pa.types.is_floating(declared):  # a whole number read as a float is the same number
        return bool(pa.types.is_floating(stored) or pa.types.is_integer(stored))
    if _strings(declared):
        return _strings(stored)
    if pa.types.is_boolean(declared):
        return False  # not equal, so not a bool: "true" or 1 is no label
    if _lists(declared):
        return _lists(stored) and fits(stored.value_type, declared.value_type)
    if pa.types.is_struct(declared):
        if not pa.types.is_struct(stored):
            return False
        have = {stored.field(i).name: stored.field(i).type for i in range(stored.num_fields)}
        return all(
            declared.field(i).name in have
            and fits(have[declared.field(i).name], declared.field(i).type)
            for i in range(declared.num_fields)
        )
    return False


def misfits(declared: pa.Schema, stored: pa.Schema) -> list[Misfit]:
    """The columns of `stored` whose type is not of their declared type's kind."""
    out = []
    for name in stored.names:
        if name in declared.names and stored.names.count(name) == 1:
            want = declared.field(name).type
            have = stored.field(name).type
            if not fits(have, want):
                out.append(Misfit(name, str(have), str(want)))
    return out


def _nulls(array: pa.Array, nullable: bool, type_: pa.DataType) -> np.ndarray:
    """Per element of `array`, does it hold a null where `type_` (and its nesting) says
    never?  `nullable`: may the elements themselves be null."""
    bad = np.zeros(len(array), dtype=bool)
    if not nullable and array.null_count:
        bad |= np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if _lists(type_) and _lists(array.type):
        item = type_.value_field
        values = array.flatten()
        inner = _nulls(values, item.nullable, item.type)
        if inner.any():
            parents = np.asarray(pc.list_parent_indices(array).to_numpy(zero_copy_only=False))
            bad[np.unique(parents[inner])] = True
    elif pa.types.is_struct(type_) and pa.types.is_struct(array.type):
        present = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        names = {array.type.field(i).name for i in range(array.type.num_fields)}
        for i in range(type_.num_fields):
            field = type_.field(i)
            if field.name in names:
                child = pc.struct_field(array, field.name)
                bad |= _nulls(child, field.nullable, field.type) & present
    return bad


def null_rows(table: pa.Table, declared: pa.Schema) -> dict[str, np.ndarray]:
    """Per declared column `table` has, a bool per row: a null the schema forbids there
    (the column's own value, or one nested in it).  Columns without one are left out."""
    out = {}
    for name in table.column_names:
        if name not in declared.names or table.column_names.count(name) != 1:
            continue
        field = declared.field(name)
        column = table.column(name)
        if not fits(column.type, field.type):
            continue  # a misfit is reported as one; its nulls mean nothing more
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        bad = _nulls(array, field.nullable, field.type)
        if bad.any():
            out[name] = bad
    return out


def schema_with(declared: pa.Schema, extra: Iterable[pa.Field]) -> pa.Schema:
    """`declared` and `extra` fields it lacks (an older run's name for a column)."""
    fields = list(declared)
    fields += [f for f in extra if f.name not in declared.names]
    return pa.schema(fields, metadata=declared.metadata)


__all__ = ["Misfit", "fits", "misfits", "null_rows", "schema_with"]
