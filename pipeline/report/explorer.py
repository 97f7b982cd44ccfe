"""The tree explorer: one self-contained HTML page per run, to walk its trees node by node.

    write_explorer("out/run=local")              -> out/run=local/explorer.html
    write_explorer("s3://b/p/run=x", "x.html")   -> a local file

The page holds everything it shows (inline CSS and JavaScript, the data as JSON in a
``<script type="application/json">`` tag) and fetches nothing, so it opens from a disk, a
bucket or the Hub's ``reports/`` folder with no server.  It lists the run's problems
with their outcome and their rows per training table; a problem opens as its tree,
expanded to a depth and then node by node (children are drawn when their parent is
opened, so a tree of thousands of nodes opens at once).  Each node shows its step text,
its Q and N, the scorer's judgement (GenPRM's Yes/No is Q >= 0.5: `actors.genprm`),
whether it answered and was correct, the rows it became, and each candidate row a gate
kept out, with the gate.

Where the numbers come from:

* the outcome is the tree's ``difficulty`` over its graded answered nodes: *solved*
  (every one correct), *mixed*, *none correct*; *no answer* when nothing answered, and
  *ungraded* when every answer's comparison was cut off;
* N is the node's subtree size (m in the paper, the visit count BG-MCTS selects by);
* the rows are read from the run's tables by their node ids (sft, kto and prm rows by
  ``node_id``, dpo and step_dpo pairs by their chosen and rejected node);
* which gate kept out which candidate is not stored (``trees.gate_drops`` counts them),
  so each tree's rows are built again under run.json's records config
  (`pipeline.records.dropped`).  Only where that rebuild gives the tree's stored gate
  counts and rows per table are the drops shown on the nodes; elsewhere the page says so
  and shows the counts alone (a run written by older code, or a comparison cut off by
  its time limit this time and not then).

Text is stored once: each node's own step, never a whole path.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter, defaultdict
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from actors.prompts import POLICY_INSTRUCTION
from pipeline.config import parse_config
from pipeline.errors import InputError
from pipeline.records import RecordsConfig
from pipeline.records.dropped import Dropped, drop_counts, explain_stored_tree
from pipeline.report.run_report import scorer_from_config
from pipeline.store.run_folder import MANIFEST, RunFolder
from search.answers import AnswerExtraction

T = TypeVar("T")
EXPLORER_HTML = "explorer.html"
TEMPLATE = "explorer_page.html"  # package data beside this module
DATA_MARK = "__EXPLORER_DATA__"
_DATA_TAG = '<script type="application/json" id="explorer-data">'
TABLES = ("sft", "dpo", "step_dpo", "prm", "kto")
# trees.difficulty -> what the page calls it
OUTCOMES = {
    "all_correct": "solved",
    "mixed": "mixed",
    "none_correct": "none correct",
    "unanswered": "no answer",
    "ungraded": "ungraded",
}
_PAIRS = ("dpo", "step_dpo")


@dataclass(frozen=True)
class RunRules:
    """What a run's rows were built under (its run.json): the records config, the search's
    answer extraction, the policy's instruction, and the scorer kind the page names."""

    records: RecordsConfig
    extraction: AnswerExtraction
    instruction: str
    scorer: str | None

    @classmethod
    def of(cls, folder: RunFolder) -> RunRules:
        config = folder.read_manifest().get("config") or {}
        where = folder.store.join(MANIFEST)
        records = parse_config(_block(config, "records", where), RecordsConfig, where)
        search = _block(config, "search", where)
        prompts = _block(_block(config, "policy", where), "prompts", where)
        try:
            extraction = AnswerExtraction(search.get("answer_extraction", "boxed"))
        except ValueError:
            raise _bad(where, "search.answer_extraction", search["answer_extraction"]) from None
        instruction = prompts.get("policy_instruction", POLICY_INSTRUCTION)
        if not isinstance(instruction, str):
            raise _bad(where, "policy.prompts.policy_instruction", instruction)
        return cls(records, extraction, instruction, scorer_from_config(config))


def _block(config: Any, name: str, where: str) -> dict[str, Any]:
    value = config.get(name) if isinstance(config, dict) else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(where, name, value)
    return value


def _bad(where: str, field: str, value: Any) -> InputError:
    return InputError(f"{where}: config.{field} cannot be {value!r}")


def explorer_data(folder: RunFolder) -> dict[str, Any]:
    """Everything the page shows, as JSON-able values (the page's only input)."""
    trees = sorted(folder.read("trees").to_pylist(), key=lambda t: _natural(t["problem_id"]))
    nodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in folder.read("tree_nodes").to_pylist():
        nodes[str(row["problem_id"])].append(row)
    tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in TABLES:
        tables[name] = defaultdict(list)
        for row in folder.read(name).to_pylist():
            tables[name][str(row["problem_id"])].append(row)
    for tree in trees:
        _check_nodes(folder, str(tree["problem_id"]), nodes.get(str(tree["problem_id"]), []))
    rules = RunRules.of(folder)
    explained = _run_to_end(_explain(trees, nodes, rules))
    problems = []
    for tree, (rebuilt, dropped) in zip(trees, explained, strict=True):
        pid = str(tree["problem_id"])
        stored = {name: tables[name].get(pid, []) for name in TABLES}
        problems.append(
            problem_data(tree, nodes[pid], stored, _checked(tree, stored, rebuilt, dropped))
        )
    return {
        "run": folder.run_id,
        "scorer": rules.scorer,
        "tables": list(TABLES),
        "outcomes": list(dict.fromkeys(OUTCOMES.values())),
        "problems": problems,
    }


def _check_nodes(folder: RunFolder, problem_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """An `InputError` naming the table and the problem when a tree's ``tree_nodes`` rows
    are not one tree: node ids 0..n-1, the root (no parent) first, every parent before
    its child (what a search writes; a damaged or partly copied run breaks it)."""
    ids = sorted(int(r["node_id"]) for r in rows)
    parents = {int(r["node_id"]): r["parent_id"] for r in rows}
    fault = None
    if not rows:
        fault = "has no rows"
    elif ids != list(range(len(ids))):
        fault = f"has node ids {ids[:3]}...{ids[-1]}, not 0..{len(ids) - 1} once each"
    elif parents[0] is not None or any(
        p is None or not 0 <= int(p) < i for i, p in parents.items() if i
    ):
        fault = "has a node whose parent is not an earlier node (or a root with a parent)"
    if fault is not None:
        raise InputError(f"{folder.location}: table tree_nodes: problem {problem_id!r} {fault}")


def _natural(problem_id: Any) -> list[Any]:
    """A sort key that puts arith/0/2 before arith/0/10."""
    parts = re.split(r"(\d+)", str(problem_id))
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts]


def _run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """`work` run to its end from synchronous code, whether or not the caller is itself
    inside an event loop (`bgmcts report` called from async code, a notebook): there
    `asyncio.run` refuses, so the work gets a loop of its own in a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()


async def _explain(
    trees: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Sequence[Mapping[str, Any]]],
    rules: RunRules,
) -> list[tuple[dict[str, list[Any]], list[Dropped]]]:
    return list(
        await asyncio.gather(
            *(
                explain_stored_tree(
                    tree,
                    nodes[str(tree["problem_id"])],
                    config=rules.records,
                    extraction=rules.extraction,
                    instruction=rules.instruction,
                )
                for tree in trees
            )
        )
    )


def _checked(
    tree: Mapping[str, Any],
    stored: Mapping[str, Sequence[Any]],
    rebuilt: Mapping[str, Sequence[Any]],
    dropped: list[Dropped],
) -> list[Dropped] | str:
    """`dropped` when the rebuild gave what the run stored for this tree (its gate counts
    and its rows per table), else why the page shows the counts alone."""
    counts = Counter({d["gate"]: d["dropped"] for d in tree["gate_drops"] or ()})
    if drop_counts(dropped) != counts:
        return (
            "built again under run.json's records config, this tree's gates count other "
            "drops than it stored, so they are not shown on the nodes"
        )
    for name in TABLES:
        if len(rebuilt.get(name, ())) != len(stored[name]):
            return (
                f"built again under run.json's records config, this tree gives another "
                f"number of {name} rows than it stored, so drops are not shown on the nodes"
            )
    return dropped


def problem_data(
    tree: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    dropped: list[Dropped] | str | None = None,
) -> dict[str, Any]:
    """One problem's entry: the tree's facts, its nodes column by column (text once per
    node), the rows each node became and the candidates each gate kept out (`dropped`;
    a string: why they are not shown)."""
    ordered = sorted(nodes, key=lambda r: int(r["node_id"]))
    parent = [r["parent_id"] for r in ordered]
    size = [1] * len(ordered)
    for i in range(len(ordered) - 1, 0, -1):  # children are created after their parent
        size[parent[i]] += size[i]
    entry: dict[str, Any] = {
        "id": str(tree["problem_id"]),
        "outcome": OUTCOMES.get(str(tree["difficulty"]), str(tree["difficulty"])),
        "reference": tree["reference"],
        "chosen": tree["chosen_node_id"],
        "chosenAnswer": tree["chosen_answer"],
        "correct": tree["correct"],
        "method": tree["method"],
        "budget": tree["budget"],
        "cUsed": tree["c_used"],
        "stop": tree["stop_reason"],
        "contaminated": tree["contaminated"],
        "rows": {name: len(rows.get(name, ())) for name in TABLES},
        "gates": {d["gate"]: d["dropped"] for d in tree["gate_drops"] or ()},
        "parent": parent,
        "text": [r["text"] for r in ordered],
        "ins": [r["inserted_text"] for r in ordered],
        "q": [r["q"] for r in ordered],
        "n": size,
        "answered": [int(bool(r["answered"])) for r in ordered],
        "answer": [r["answer"] for r in ordered],
        "label": [None if r["label"] is None else int(r["label"]) for r in ordered],
        "finish": [r["finish"] for r in ordered],
        "error": [r["error"] for r in ordered],
        "tokens": [r["output_tokens"] for r in ordered],
        "nodeRows": node_rows(rows),
    }
    if isinstance(dropped, str):
        entry["dropsNote"] = dropped
    elif dropped is not None:
        entry["nodeDrops"] = node_drops(dropped)
    return entry


def node_rows(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[list[Any]]]:
    """node id -> [table, role, the pair's other node] for each row the node became: sft,
    prm and kto rows by the node their path ends at (kto's role: desirable or not), dpo
    and step_dpo pairs on both their nodes."""
    out: dict[str, list[list[Any]]] = defaultdict(list)
    for name in ("sft", "prm"):
        for row in rows.get(name, ()):
            out[str(row["node_id"])].append([name, "", None])
    for row in rows.get("kto", ()):
        role = "desirable" if row["label"] else "undesirable"
        out[str(row["node_id"])].append(["kto", role, None])
    for name in _PAIRS:
        for row in rows.get(name, ()):
            chosen, rejected = row["chosen_node_id"], row["rejected_node_id"]
            out[str(chosen)].append([name, "chosen", rejected])
            out[str(rejected)].append([name, "rejected", chosen])
    return dict(out)


def node_drops(dropped: Iterable[Dropped]) -> dict[str, list[list[Any]]]:
    """node id -> [gate, the pair's other node, the node's side] for each candidate a gate
    kept out: a path on its answered node, a pair on both of its nodes, a relabelled prm
    step on the node that holds it."""
    out: dict[str, list[list[Any]]] = defaultdict(list)
    for d in dropped:
        if len(d.node_ids) == 2:
            chosen, rejected = d.node_ids
            out[str(chosen)].append([d.gate, rejected, "chosen"])
            out[str(rejected)].append([d.gate, chosen, "rejected"])
        else:
            out[str(d.node_ids[0])].append([d.gate, None, ""])
    return dict(out)


def render_html(data: Mapping[str, Any]) -> str:
    """The page: the template with `data` in its JSON script tag.  Every "<" of the JSON
    is escaped (as JSON allows), so no text of a node can close the tag."""
    template = resources.files("pipeline.report").joinpath(TEMPLATE).read_text("utf-8")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return template.replace(DATA_MARK, payload.replace("<", "\\u003c"), 1)


def page_data(page: str) -> Any:
    """The data a page written by `render_html` holds (what its script reads)."""
    start = page.index(_DATA_TAG) + len(_DATA_TAG)
    return json.loads(page[start : page.index("</script>", start)])


def write_explorer(run_dir: str | Path, output: str | Path | None = None) -> tuple[str, int]:
    """Write the run's explorer page: to `output` (a local file), else as explorer.html
    in the run folder (a bucket's too).  Returns where it went and its size in bytes."""
    folder = RunFolder.at(run_dir)
    page = render_html(explorer_data(folder)).encode("utf-8")
    if output is not None:
        Path(output).write_bytes(page)
        return str(output), len(page)
    folder.store.write_bytes(page, EXPLORER_HTML)
    return str(folder.store.join(EXPLORER_HTML)), len(page)


__all__ = [
    "EXPLORER_HTML",
    "OUTCOMES",
    "RunRules",
    "explorer_data",
    "node_drops",
    "node_rows",
    "page_data",
    "problem_data",
    "render_html",
    "write_explorer",
]
