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
* ``kto_label``: a kto label that disagrees with the node's grade in ``nodes``.

A row with any of them is *dirty*; `hygiene` counts per table and in all.  It reads
whatever a run wrote, old schemas included (a table without an optional column is checked
for what it has), so the same numbers come out for runs before and after a change.

"Clean" must mean every committed row was checked, so `hygiene_of_run` refuses, with an
`InputError` naming it, a run it cannot read whole: a part a commit marker names that is
not there (readers would skip its batch without a word), or a part without a column of
`NEEDED`.  What a run is expected to hold is what its own markers say it committed: the
sink writes no part for a table a batch has no rows of, so a run with no dpo pairs has
no dpo parts, names none, and is checked like any other.

`bgmcts check <run folder>` (`jobs/check.py`) prints it for a run, ``dirty_rows=<int>`` last.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.grading import answers_match
from pipeline.errors import InputError
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
)
TABLES = ("sft", "dpo", "step_dpo", "kto", "prm")
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


@dataclass
class Hygiene:
    tables: dict[str, TableHygiene]

    @property
    def dirty_rows(self) -> int:
        return sum(t.dirty for t in self.tables.values())

    def markdown(self) -> str:
        head = "| table | rows | " + " | ".join(c.replace("_", " ") for c in CHECKS)
        lines = [head + " | dirty |", "|---" * (len(CHECKS) + 3) + "|"]
        for name, t in self.tables.items():
            cells = " | ".join(str(t.checks[c]) for c in CHECKS)
            lines.append(f"| {name} | {t.rows} | {cells} | {t.dirty} |")
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
                if node is not None and bool(node["label"]) != bool(row["label"]):
                    found.add("kto_label")
            table.rows += 1
            table.checks.update(found)
            table.dirty += bool(found)
        result[name] = table
    return Hygiene(result)


def hygiene_of_run(run: Any, timeout_s: float = 5.0) -> Hygiene:
    """`hygiene` of a `pipeline.store.run_folder.RunFolder` (reads its committed tables
    with the schema each file was written with, so older runs read too).

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

    def rows(kind: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for part in run.parts(kind):
            table = run.read_part(part)  # the rows that count (`RunFolder.read_part`)
            for names in NEEDED[kind]:
                if not set(names) & set(table.column_names):
                    part_name = str(part).rsplit("/", 1)[-1]
                    raise InputError(
                        f"{run.location}: table {kind}: {part_name} has no column "
                        f"{' or '.join(names)}"
                    )
            out.extend(table.to_pylist())
        return out

    tables = {name: rows(name) for name in TABLES}
    return asyncio.run(hygiene(tables, rows("nodes"), rows("trees"), timeout_s))


__all__ = [
    "CHECKS",
    "NEEDED",
    "TABLES",
    "Hygiene",
    "TableHygiene",
    "after_answer",
    "hygiene_of_run",
]
