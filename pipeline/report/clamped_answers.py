"""Engine answers whose token counts were clamped: what the run summary, run.json and the
report say about them.

An engine's server can report counts that cannot be (more prompt tokens served from its
cache than sent, a negative count, a count that is no number).  Each answer's counts are
clamped as it is made (`actors.engines.read_counts`), so the `trees` table only ever
holds counts that can be and cannot show that anything was wrong; the warning the
engine's replica logs goes with the cluster.  So the search actors count those answers
per engine on the run's progress board (`actors.progress`), the driver reads them at
the end, and the run says so: a line of the summary it prints, `clamped_answers` in
run.json's summary, a sentence of report.md and `clamped_answers` in report.json.

run.json keeps the run's total: a rerun of the same run (a resume) adds its answers to
those of the invocations before it that reached their end.  An invocation that was
stopped before its end (killed, out of space) took its counts with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.progress import CLAMPED_ENGINES, clamped_counts
from pipeline.errors import InputError
from search.protocols import COUNT_FAULTS, ClampedCounts

# The engines, as the run names them, by the prefix of their board counters.
ENGINES = {"policy": "policy", "prm": "scorer"}
CLAMPED_KEY = "clamped_answers"  # in run.json's summary and in report.json
_PARTS = ("answers", *COUNT_FAULTS)
_FAULT_WORDS = {
    "cached_above_sent": "cached > sent",
    "negative": "negative",
    "not_a_number": "not a number",
}


@dataclass(frozen=True)
class ClampedAnswers:
    """One engine's answers whose counts were clamped; `engine` is its `engine.kind`."""

    engine: str
    counts: ClampedCounts

    def sentence(self, role: str) -> str:
        """What the run says: "policy engine (llamacpp) reported out-of-range token
        counts in 3 answers (cached > sent: 3); they were clamped"."""
        n = self.counts.answers
        faults = ", ".join(
            f"{_FAULT_WORDS[fault]}: {getattr(self.counts, fault)}"
            for fault in COUNT_FAULTS
            if getattr(self.counts, fault)
        )
        return (
            f"{role} engine ({self.engine}) reported out-of-range token counts in {n} "
            f"answer{'s' if n != 1 else ''} ({faults}); they were clamped"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, **{p: getattr(self.counts, p) for p in _PARTS}}


def clamped_from_board(
    snapshot: Mapping[str, Any], engines: Mapping[str, str]
) -> dict[str, ClampedAnswers]:
    """The engines that had answers clamped, by role ("policy", "scorer"), from a progress
    board snapshot (`actors.progress.ProgressBoard.snapshot`); `engines`: each role's
    engine kind."""
    out = {}
    for prefix in CLAMPED_ENGINES:
        counts = clamped_counts(snapshot, prefix)
        if counts:
            out[ENGINES[prefix]] = ClampedAnswers(engines[ENGINES[prefix]], counts)
    return out


def merge_clamped(
    earlier: Mapping[str, ClampedAnswers], now: Mapping[str, ClampedAnswers]
) -> dict[str, ClampedAnswers]:
    """The answers of earlier invocations of a run and of this one, per role (an engine
    kind that changed between them is named with both)."""
    out = dict(earlier)
    for role, answers in now.items():
        before = out.get(role)
        if before is None:
            out[role] = answers
            continue
        kinds = dict.fromkeys([*before.engine.split(", "), answers.engine])
        out[role] = ClampedAnswers(", ".join(kinds), before.counts + answers.counts)
    return out


def clamped_sentences(clamped: Mapping[str, ClampedAnswers]) -> list[str]:
    """One sentence per engine with clamped answers, the policy first."""
    return [clamped[role].sentence(role) for role in ENGINES.values() if role in clamped]


def clamped_answers_note(clamped: Mapping[str, ClampedAnswers]) -> str | None:
    """report.md's paragraph on them; None when no engine had any."""
    said = [f"The {sentence} as they entered." for sentence in clamped_sentences(clamped)]
    if not said:
        return None
    return " ".join(
        [
            *said,
            "Clamped: made whole numbers of at least 0, cached at most sent; the sums "
            "above hold the clamped counts.",
        ]
    )


def clamped_as_json(clamped: Mapping[str, ClampedAnswers]) -> dict[str, dict[str, Any]]:
    return {role: answers.as_dict() for role, answers in clamped.items()}


def clamped_from_manifest(manifest: Mapping[str, Any], where: str) -> dict[str, ClampedAnswers]:
    """The clamped answers run.json's summary records (`where`: run.json's path, for the
    message); none for a run.json without them (older runs, a run that did not end).
    A value that is not what a run writes is an `InputError` naming the field."""
    summary = manifest.get("summary")
    data = summary.get(CLAMPED_KEY) if isinstance(summary, Mapping) else None
    if data is None:
        return {}
    field = f"{where}: summary.{CLAMPED_KEY}"
    if not isinstance(data, Mapping):
        raise InputError(f"{field} is {type(data).__name__}, not a mapping")
    out = {}
    for role, entry in data.items():
        if role not in ENGINES.values():
            raise InputError(f"{field}.{role}: not an engine (policy, scorer)")
        if not isinstance(entry, Mapping) or not isinstance(entry.get("engine"), str):
            raise InputError(f"{field}.{role}: not a mapping with the engine's kind")
        counts = {}
        for part in _PARTS:
            value = entry.get(part, 0)
            if type(value) is not int or value < 0:
                raise InputError(f"{field}.{role}.{part}: {value!r} is not a count")
            counts[part] = value
        out[role] = ClampedAnswers(entry["engine"], ClampedCounts(**counts))
    return {role: answers for role, answers in out.items() if answers.counts}


__all__ = [
    "CLAMPED_KEY",
    "ClampedAnswers",
    "clamped_answers_note",
    "clamped_as_json",
    "clamped_from_board",
    "clamped_from_manifest",
    "clamped_sentences",
    "merge_clamped",
]
