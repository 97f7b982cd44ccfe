"""Reading a Parquet part, its failure one line that names the part.

pyarrow's own errors often name no file ("Corrupt snappy compressed data", "Couldn't
deserialize thrift", a part read from bytes: "Parquet magic bytes not found"), and a
run has hundreds of parts: a user told only that is left to bisect them.  Every reader
of run folders reads inside `reading(...)`, so a part that is cut short, not Parquet, or
damaged inside becomes `UnreadablePart` (an `InputError`: exit 2, "fix the input")
naming the table and the part; and a part whose column cannot be read as its declared
type names the column as well (`cast_failure`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.errors import InputError


class UnreadablePart(InputError):
    """A Parquet part that cannot be read (or not as its declared schema); `path` is it,
    `detail` pyarrow's error in one line (its type first) and the columns at fault."""

    def __init__(self, message: str, *, path: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.detail = detail or message


def part_label(part: Any) -> str:
    """`<table> part <file>`: the record type folder and the part's file name."""
    pieces = str(part).replace("\\", "/").rsplit("/", 2)
    if len(pieces) == 3:
        return f"table {pieces[1]}: {pieces[2]}"
    return pieces[-1]


def reason_of(exc: BaseException) -> str:
    """The first line of pyarrow's message, without the path it sometimes repeats."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith("Could not open Parquet input source") and "': " in text:
        text = text.split("': ", 1)[1]
    return text


@contextlib.contextmanager
def reading(part: Any, where: str = "") -> Iterator[None]:
    """Turn a failure to read `part` into `UnreadablePart` naming it (`where`: the run
    folder, put first).  A part that is not there stays a FileNotFoundError (its message
    names it), which callers that list and read may retry on."""
    try:
        yield
    except FileNotFoundError:
        raise
    except UnreadablePart:
        raise
    except (pa.ArrowException, OSError, EOFError) as exc:
        prefix = f"{where}: " if where else ""
        raise UnreadablePart(
            f"{prefix}{part_label(part)} cannot be read ({reason_of(exc)}); it is cut "
            "short, damaged or not Parquet",
            path=str(part),
            detail=f"{type(exc).__name__}: {reason_of(exc)}",
        ) from None


def cast_failure(
    part: Any, stored: Any, declared: Any, cause: BaseException, where: str = ""
) -> UnreadablePart | None:
    """The columns of `part` (its own schema `stored`) that are not of their `declared`
    type's kind, as an `UnreadablePart` (`cause`: pyarrow's failure to cast them); None
    when every column fits."""
    from pipeline.records.conformance import misfits

    found = misfits(declared, stored)
    if not found:
        return None
    prefix = f"{where}: " if where else ""
    named = "; ".join(f"column {m.column} {m.describe()}" for m in found)
    return UnreadablePart(
        f"{prefix}{part_label(part)}: {named}",
        path=str(part),
        detail=f"{type(cause).__name__}: {reason_of(cause)}; {named}",
    )


__all__ = ["UnreadablePart", "cast_failure", "part_label", "reading", "reason_of"]
