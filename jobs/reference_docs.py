"""Write the reference docs generated from the code, or check that they are fresh.

    python -m jobs.reference_docs            # rewrite the generated parts (make docs)
    python -m jobs.reference_docs --check    # exit 1 naming each stale file, 0 when fresh

* docs/configuration.md: every key of the synthesis run YAML (`RunConfig`) and of the
  evaluation YAML (`EvalConfig`), one section per config model, from the pydantic field
  descriptions; a discriminated union gets one section per variant.
* docs/records.md: one section per record type, in the order of `pipeline.records.SCHEMAS`,
  from the schemas' field descriptions.

Only the text between the `BEGIN` and `END` marker lines is rewritten; the prose around
them is written by hand.  A file without markers gets the marked block appended; a missing
file is created with a title and the block.  Exit status 2: a file's markers are broken.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import json
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

BEGIN = "<!-- generated: do not edit below; python -m jobs.reference_docs -->"
END = "<!-- end of generated -->"
REPO_ROOT = Path(__file__).resolve().parent.parent
_LONG_TEXT = 60  # a longer default string is shown by its start and its length


class MarkerError(ValueError):
    """A docs file whose generated-block markers are not one BEGIN line then one END line."""


# ------------------------------------------------------------------------- config models
@dataclass(frozen=True)
class Place:
    """Where a model sits in a YAML file: its key path and the variant that selects it."""

    path: str  # dotted key path of the model's mapping; "" at the top level, "[]": any item
    when: str | None = None  # "algorithm: bg_mcts" for a variant of a discriminated union
    part: str = "run"  # "run" (synthesis YAML) or "eval" (evaluation YAML)


@dataclass(frozen=True)
class Row:
    """One key of a section's table."""

    path: str
    name: str  # Model.field, for messages
    type: str
    default: str
    description: str


@dataclass
class Section:
    """One config model: where it is first reached (the rows' key paths) and where else."""

    model: type[BaseModel]
    places: list[Place] = field(default_factory=list)

    @property
    def place(self) -> Place:
        return self.places[0]

    @property
    def anchor(self) -> str:
        return self.model.__name__.lower()

    def rows(self) -> list[Row]:
        return [
            Row(
                path=_join(self.place.path, name),
                name=f"{self.model.__name__}.{name}",
                type=_type_cell(info),
                default=_default_cell(info),
                description=" ".join((info.description or "").split()),
            )
            for name, info in self.model.model_fields.items()
        ]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _nested(tp: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models an annotation holds, each with its key suffix ("[]": a list item)."""
    origin = get_origin(tp)
    if _is_model(tp):
        yield tp, suffix
    elif origin is Annotated:
        yield from _nested(get_args(tp)[0], suffix)
    elif (args := _union_args(tp)) is not None:
        for arg in args:
            yield from _nested(arg, suffix)
    elif origin in (list, tuple, set, frozenset, Sequence):
        for arg in get_args(tp):
            if arg is not Ellipsis:
                yield from _nested(arg, suffix + "[]")
    elif origin in (dict, Mapping):
        yield from _nested(get_args(tp)[1], suffix + ".<key>")


def _discriminator(info: FieldInfo) -> str | None:
    """The discriminator of a field's union, whether on the field or inside its Annotated type."""
    if isinstance(info.discriminator, str):
        return info.discriminator

    def find(tp: Any) -> str | None:
        if get_origin(tp) is Annotated:
            for meta in get_args(tp)[1:]:
                if isinstance(meta, FieldInfo) and isinstance(meta.discriminator, str):
                    return meta.discriminator
            return find(get_args(tp)[0])
        for arg in get_args(tp):
            found = find(arg)
            if found is not None:
                return found
        return None

    return find(info.annotation)


def _tags(model: type[BaseModel], discriminator: str) -> list[str]:
    """The discriminator values that select `model` (its Literal)."""
    annotation = model.model_fields[discriminator].annotation
    return [str(v) for v in get_args(annotation)] if get_origin(annotation) is Literal else []


def collect_sections(
    roots: Sequence[tuple[type[BaseModel], str]] | None = None,
) -> list[Section]:
    """Every config model reached from the roots (default: RunConfig, EvalConfig), in order.

    The walk goes depth-first in field order through nested models, unions of models,
    discriminated unions (each variant), and lists and mappings of models.  A model
    gets one section, at the first place it is reached; later places are listed with it.
    """
    if roots is None:
        from pipeline.config import RunConfig
        from pipeline.evaluation.config import EvalConfig

        roots = [(RunConfig, "run"), (EvalConfig, "eval")]
    sections: dict[type[BaseModel], Section] = {}

    def walk(model: type[BaseModel], place: Place, stack: tuple[type[BaseModel], ...]) -> None:
        section = sections.setdefault(model, Section(model))
        if place not in section.places:
            section.places.append(place)
        if model in stack:
            return
        for name, info in model.model_fields.items():
            key = _join(place.path, name)
            variants = list(dict.fromkeys(_nested(info.annotation)))
            discriminator = _discriminator(info) if len(variants) > 1 else None
            for sub, suffix in variants:
                when = None
                if discriminator is not None:
                    when = f"{discriminator}: {' | '.join(_tags(sub, discriminator))}"
                walk(sub, Place(key + suffix, when, place.part), (*stack, model))

    for root, part in roots:
        walk(root, Place("", None, part), ())
    anchors = [s.anchor for s in sections.values()]
    clashes = sorted({a for a in anchors if anchors.count(a) > 1})
    if clashes:
        raise ValueError(f"config models share a class name: {clashes}")
    return list(sections.values())


def undocumented_fields(sections: Sequence[Section] | None = None) -> list[str]:
    """Key paths (with their Model.field) of every reached field without a description."""
    sections = collect_sections() if sections is None else sections
    return [
        f"{row.path} ({row.name})"
        for section in sections
        for row in section.rows()
        if not row.description
    ]


# ------------------------------------------------------------------------- cells
def _type_text(tp: Any) -> str:
    """A field type as a YAML user reads it: str, int, list[int], sequential | full, ..."""
    origin = get_origin(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if origin is Annotated:
        return _type_text(get_args(tp)[0])
    if (args := _union_args(tp)) is not None:
        return " | ".join(dict.fromkeys(_type_text(a) for a in args))
    if origin is Literal:
        return " | ".join(v if isinstance(v, str) else json.dumps(v) for v in get_args(tp))
    if origin in (list, tuple, set, frozenset, Sequence):
        items = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list[{' | '.join(dict.fromkeys(_type_text(a) for a in items)) or 'any'}]"
    if origin in (dict, Mapping):
        key, value = get_args(tp) or (Any, Any)
        return f"mapping[{_type_text(key)}, {_type_text(value)}]"
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return " | ".join(str(m.value) for m in tp)
        if issubclass(tp, PurePath):
            return "path"
        return tp.__name__
    return str(tp)


def _link(model: type[BaseModel], label: str | None = None) -> str:
    return f"[`{label or model.__name__}`](#{model.__name__.lower()})"


def _type_cell(info: FieldInfo) -> str:
    variants = list(dict.fromkeys(_nested(info.annotation)))
    if not variants:
        return f"`{_escape(_type_text(info.annotation))}`"
    discriminator = _discriminator(info) if len(variants) > 1 else None
    if discriminator is not None:
        links = ", ".join(
            _link(m, " \\| ".join(_tags(m, discriminator)) or None) for m, _ in variants
        )
        return f"one of, by `{discriminator}`: {links}"
    suffix = variants[0][1]
    links = ", ".join(_link(m) for m, _ in variants)
    text = f"list of {links}" if suffix.endswith("[]") else links
    if suffix.endswith(".<key>"):
        text = f"mapping of {links}"
    if type(None) in (_union_args(info.annotation) or ()):
        text += " or `null`"
    return text


def _value_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _value_text(value.value)
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, str):
        if len(value) > _LONG_TEXT or "\n" in value.strip("\n"):
            start = json.dumps(value[:40], ensure_ascii=False)[:-1]
            return f'{start}..." ({len(value)} characters)'
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _default_cell(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return "its defaults"
    text = _value_text(value).replace("`", "'")
    return f"`{_escape(text)}`"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


# ------------------------------------------------------------------------- markdown
_PARTS = {
    "run": ("Synthesis run", "python -m jobs.synthesize --config run.yaml"),
    "eval": ("Evaluation", "python -m jobs.evaluate --config eval.yaml"),
}


def _summary(model: type[BaseModel]) -> str:
    doc = inspect.cleandoc(model.__dict__.get("__doc__") or "")
    return " ".join(doc.split("\n\n")[0].split())


def _section_markdown(section: Section) -> str:
    place = section.place
    where = f"`{place.path}`" if place.path else "Top level"
    if place.when:
        where += f" with `{place.when}`"
    model = section.model
    lines = [f'<a id="{section.anchor}"></a>', "", f"### {where}", ""]
    summary = _summary(model)
    lines.append(f"`{model.__module__}.{model.__qualname__}`" + (f": {summary}" if summary else ""))
    also = list(
        dict.fromkeys(
            f"`{p.path}`" + (" (evaluation)" if p.part == "eval" else "")
            for p in section.places[1:]
            if p.path != place.path
        )
    )
    if also:
        lines += ["", "Also at " + ", ".join(also) + "."]
    lines += ["", "| key | type | default | description |", "|---|---|---|---|"]
    for row in section.rows():
        description = _escape(row.description)
        lines.append(f"| `{row.path}` | {row.type} | {row.default} | {description} |")
    return "\n".join(lines)


def configuration_markdown(sections: Sequence[Section] | None = None) -> str:
    """The generated part of docs/configuration.md."""
    sections = collect_sections() if sections is None else sections
    out = [
        "Every key of the two YAML configs, generated from the pydantic models' field "
        "descriptions. A key path is dotted (`search.c`); `[]` stands for any item of a "
        "list. A section `with kind: ...` (or `algorithm: ...`) applies when that key "
        "selects it."
    ]
    for part, (title, command) in _PARTS.items():
        out.append(f"## {title} (`{command}`)")
        for section in sections:
            if section.place.part == part:
                out.append(_section_markdown(section))
    return "\n\n".join(out)


def records_markdown(schemas: Mapping[str, Any] | None = None) -> str:
    """The generated part of docs/records.md: each record type's Parquet fields."""
    from pipeline.records import SCHEMAS, schema_markdown

    schemas = SCHEMAS if schemas is None else schemas
    out = [
        "Every record type's Parquet schema, generated from the schemas' field "
        "descriptions, in the order the records are listed in `pipeline.records.SCHEMAS`."
    ]
    for name, schema in schemas.items():
        metadata = schema.metadata or {}
        version = metadata.get(b"schema_version", b"").decode()
        heading = f"## `{name}`"
        note = f"Schema version {version}." if version else ""
        out.append("\n\n".join(x for x in (heading, note, schema_markdown(schema)) if x))
    return "\n\n".join(out)


# ------------------------------------------------------------------------- files
@dataclass(frozen=True)
class Doc:
    relative: str
    title: str
    render: Callable[[], str]  # the generated markdown


DOCS = (
    Doc("docs/configuration.md", "Configuration reference", configuration_markdown),
    Doc("docs/records.md", "Record reference", records_markdown),
)


def _marker_lines(lines: list[str], marker: str) -> list[int]:
    return [i for i, line in enumerate(lines) if line.rstrip("\r\n") == marker]


def splice(existing: str | None, title: str, generated: str) -> str:
    """`existing` with the text between the marker lines replaced by `generated`.

    No file: a title, then the block.  No markers: the block appended at the end.  The
    text outside the markers is kept byte for byte.
    """
    block = f"{BEGIN}\n\n{generated.strip(chr(10))}\n\n{END}\n"
    if existing is None:
        return f"# {title}\n\n{block}"
    lines = existing.splitlines(keepends=True)
    begins, ends = _marker_lines(lines, BEGIN), _marker_lines(lines, END)
    if not begins and not ends:
        if not existing:
            return block
        return existing + ("" if existing.endswith("\n") else "\n") + "\n" + block
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise MarkerError(
            f"expected one line {BEGIN!r} followed by one line {END!r}; found "
            f"{len(begins)} and {len(ends)}"
        )
    before = "".join(lines[: begins[0]])
    after = "".join(lines[ends[0] + 1 :])
    end_line = lines[ends[0]]
    # keep the END line's own ending (none at the very end of a file)
    block = block[: -len("\n")] + end_line[len(END) :]
    return before + block + after


def _read(path: Path) -> str:
    """The file's text with its line endings as they are (read_text would fold CRLF)."""
    return path.read_bytes().decode("utf-8")


def rendered(root: Path | None = None, docs: Sequence[Doc] | None = None) -> dict[Path, str]:
    """Each docs file's path and the full text it should have (default: this repository's)."""
    root = REPO_ROOT if root is None else root
    out: dict[Path, str] = {}
    for doc in DOCS if docs is None else docs:
        path = root / doc.relative
        existing = _read(path) if path.is_file() else None
        try:
            out[path] = splice(existing, doc.title, doc.render())
        except MarkerError as exc:
            raise MarkerError(f"{path}: {exc}") from None
    return out


def stale(root: Path | None = None, docs: Sequence[Doc] | None = None) -> list[Path]:
    """The docs files whose generated part differs from what the code gives (or missing)."""
    return [
        path
        for path, text in rendered(root, docs).items()
        if not path.is_file() or _read(path) != text
    ]


def write(root: Path | None = None, docs: Sequence[Doc] | None = None) -> list[Path]:
    """Rewrite the generated part of every stale docs file; returns the files written."""
    written = []
    for path, text in rendered(root, docs).items():
        if path.is_file() and _read(path) == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            paths = stale()
            for path in paths:
                print(
                    f"stale: {path.relative_to(REPO_ROOT)} (run `make docs`, i.e. "
                    "python -m jobs.reference_docs)",
                    file=sys.stderr,
                )
            return 1 if paths else 0
        for path in write():
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    except MarkerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
