"""`false_equations` on the step text SmolLM2 writes: it flags the arithmetic that provably
does not hold, and nothing it cannot read (algebra, units, exponents, LaTeX, times)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import SupportsIndex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.records import equations
from pipeline.records.equations import false_equations, states_false_equation


@pytest.mark.parametrize(
    "text",
    [
        "Step 1: Mia has 14 + 5 = 19 shells. The answer is 19.",
        "Jon has 6 x 5 = 30 marbles.",
        "3 x 8 = 24",
        "3X8 = 24",
        "36 / 3 = 12",
        "$1,200 + $300 = $1,500",
        "9 - 4 = 5 cards",
        "3 - 7 = -4",
        "-3 + 5 = 2",
        "(2 + 3) * 4 = 20",
        "2 × 3 = 6 and 8 ÷ 2 = 4 and 5 − 1 = 4",
        r"$3 \times 4 = 12$ and 3 \cdot 4 = 12 and 12 \div 4 = 3",
        "1.5 * 2 = 3.0",
        "She pays 2.50 * 4 = $10.00.",
        "So 10 / 3 = 3.33 each.",  # rounded to the places written
        "No arithmetic here. The answer is 7.",
        "",
    ],
)
def test_true_or_plain_text_states_no_false_equation(text: str) -> None:
    assert false_equations(text) == []
    assert not states_false_equation(text)


@pytest.mark.parametrize(
    ("text", "false"),
    [
        ("Step 2: Carla has 7 - 9 = 1 sticker.", ["7 - 9 = 1"]),
        (" 1: Jon has 30 - 6 = 14 marbles. The answer is 14.", ["30 - 6 = 14"]),
        ("Step 3: 16 + 16 = 28 pencils.", ["16 + 16 = 28"]),
        ("Jon has 16 x 12 = 180 coins.", ["16 x 12 = 180"]),
        ("3x8 = 25", ["3x8 = 25"]),
        ("36 / 3 = 11", ["36 / 3 = 11"]),
        ("$1,200 + $300 = $1,400", ["$1,200 + $300 = $1,400"]),
        ("9 - 4 = 6 cards", ["9 - 4 = 6"]),
        ("3 - 7 = 4", ["3 - 7 = 4"]),
        ("-3 + 5 = 3", ["-3 + 5 = 3"]),
        ("(2 + 3) * 4 = 21", ["(2 + 3) * 4 = 21"]),
        ("2 × 3 = 7", ["2 × 3 = 7"]),
        ("8 ÷ 2 = 5", ["8 ÷ 2 = 5"]),
        ("3 · 4 = 13", ["3 · 4 = 13"]),
        ("**Step 2:** **3 + 4 = 8**", ["3 + 4 = 8"]),  # Markdown bold, not a power
        (r"$3 \times 4 = 13$", [r"$3 \times 4 = 13"]),
        ("Since 11 + 3 = 4, Hugo has 4 apples.", ["11 + 3 = 4"]),
        # a parenthetical aside: the brackets around the equation are not part of it
        ("She has 7 apples (3 + 4 = 8).", ["3 + 4 = 8"]),
        # an integer right side is exact: a floor is not a rounding
        ("10 / 3 = 3", ["10 / 3 = 3"]),
        ("10 / 3 = 3.2", ["10 / 3 = 3.2"]),
        # every equation of a step, each one on its own
        ("2 + 2 = 4, then 4 + 4 = 9 and 9 - 1 = 7.", ["4 + 4 = 9", "9 - 1 = 7"]),
        ("Emma has 2 + 7 = 9.\nEmma has 11 - 7 = 2 marbles.", ["11 - 7 = 2"]),
    ],
)
def test_false_arithmetic_is_reported_as_written(text: str, false: list[str]) -> None:
    assert false_equations(text) == false
    assert states_false_equation(text)


def test_a_chain_is_read_pairwise() -> None:
    # the running total: "12 * 3 = 36 + 1" is not <expression> = <number>, "36 + 1 = 37" is
    assert false_equations("12 * 3 = 36 + 1") == []
    assert false_equations("12 * 3 = 36 + 1 = 37") == []
    assert false_equations("12 * 3 = 36 + 1 = 38") == ["36 + 1 = 38"]
    assert false_equations("12 * 3 = 35 = 35") == ["12 * 3 = 35"]
    # a bare number on the left (the chain's "= 3 = 4") is a restatement, not checked
    assert false_equations("4 - 1 = 3 = 4") == []


@pytest.mark.parametrize(
    "text",
    [
        "x - 2 = 3",  # a variable, not a sign
        "x -2 = 3",
        "2x + 3 = 9",  # a number glued to a letter is algebra
        "2 + 3 = 6x",
        "9 - 4 = 6cm",  # or a unit we do not read
        "x = 3 + 4",
        "3^2 + 1 = 10",  # an exponent in front
        "2 + 3 = 2^3",
        r"\frac{6}{3} + 2 = 5",  # LaTeX we do not read
        "1 dozen = 12",  # unit statements: one number on the left
        "$1 = 100 cents",
        "50 * 20% = 10",  # a percent
        "1/2 + 1/4 = 3/4",  # a fraction on the right is not one number
        "2(3 + 4) = 15",  # implicit products are not parsed
        "2 + 2 == 5",  # comparisons, not equations
        "a <= 3 + 4",
        "n := 3 + 4",
        "At 2:30 + 1 = 3:30",  # times of day
        "2 + 3 = 1,5",  # a decimal comma
        "2 ** 3 = 9",
    ],
)
def test_what_cannot_be_read_is_not_false(text: str) -> None:
    assert false_equations(text) == []


def test_a_division_by_zero_has_no_value_so_it_is_not_reported() -> None:
    # the checker compares two values; "5 / 0" has none, so nothing is proved
    assert false_equations("5 / 0 = 0") == []
    assert false_equations("5 / (2 - 2) = 1") == []


def test_the_tolerance_is_relative_to_the_right_side() -> None:
    assert false_equations("1000000 + 0.5 = 1000000.5") == []
    assert false_equations("0.1 + 0.2 = 0.3") == []  # exact fractions, no float error
    assert false_equations("1 / 3 = 0.333") == []  # rounded to the three places written
    assert false_equations("1 / 3 = 0.334") == ["1 / 3 = 0.334"]


def test_a_line_break_ends_an_equation() -> None:
    # without it "5\n6 + 1" would run into one right side and hide the false second line
    assert false_equations("2 + 3 = 5\n6 + 1 = 8") == ["6 + 1 = 8"]


def test_a_very_long_expression_is_skipped() -> None:
    long = " + ".join(["1"] * 150) + " = 7"
    assert false_equations(long) == []


# ---- untrusted text: bounded, linear, never raises ------------------------------------

# A number past Python's int conversion limit (4,300 digits) raised ValueError from the
# right side's conversion, outside the parser's guard.
HUGE = "7" * 5_000


@pytest.mark.parametrize(
    "text",
    [
        f"1 + 1 = {HUGE}",
        f"{HUGE} + 1 = 2",
        f"1 + 1 = 2.{HUGE}",
        f"1 + 1 = -{HUGE}",
        f"1 + 1 = ${HUGE[:4]},{','.join(['777'] * 2_000)}",  # thousands commas
        "9" * 1_000_000 + " - 1 = 3",
        "1 + 1 = " + "9" * 1_000_000,
        "1e999999 + 1 = 2",
        "1 + 1 = 1e999999",
        "2 + 2 = 1E-999999",
        "nan + 1 = nan",
        "NaN + 1 = 2",
        "inf - inf = 0",
        "1 / 0 = inf",
        "1 + 1 = Infinity",
        "0x10 + 1 = 17",
        "0xFF + 1 = 256",
        "0b101 + 1 = 6",
        "0o17 + 1 = 16",
        "$0x10 + 1 = 17",
        "(" * 100_000 + "1 + 1" + ")" * 100_000 + " = 3",
        "(" * 90
        + "1 + 1"
        + ")" * 90
        + " = 3",  # under the token bound, deeper than the nesting one
        "- " * 150 + "1 + 1 = 7",
        "1 " + "+ " * 190 + "1 = 5",
        "1 + 1 = 2" + " = 2" * 200_000,
        "=" * 1_000_000,
        "(" * 1_000_000,
        ")" * 500_000 + " = 1",
        "1 + 1 = 3 " * 100_000,  # a 1 MB line
        "𝟐 + 𝟑 = " + "𝟔" * 5_000,  # mathematical bold digits, read by Python as digits
        "٢" * 5_000 + " + ٣ = ٥",  # Arabic-Indic digits
        "１２ + ３ = １５",
        "\x00 1 + 1 = 3 \x00",
        "\ud800 1 + 1 = 2",  # a lone surrogate
        "1 + 1 = 2\u2028 3 + 3 = 6",
        "1,000,000,000,000,000,000,000,000,000,000,000,000,000,000,000 + 1 = 0",
    ],
)
def test_hostile_text_never_raises_and_flags_nothing_it_cannot_prove(text: str) -> None:
    found = false_equations(text)
    assert isinstance(found, list)
    assert isinstance(states_false_equation(text), bool)
    # none of these states a false equation the checker may read: too long, too deep, in
    # another base, or not a number at all
    assert "0x" not in "".join(found) and HUGE not in "".join(found)


def test_a_number_in_another_base_is_not_read_as_a_product() -> None:
    # "0x10" is no "0 x 10": numbers in another base are not evaluated, as a word is not
    for text in ("0x10 + 1 = 17", "0X10 + 1 = 17", "0x10 + 1 = 99", "0b11 * 2 = 6", "0o7 + 1 = 8"):
        assert false_equations(text) == [], text
    # and they end an expression: the false equation beside one is still found
    assert false_equations("0x10 is 16 and 2 + 2 = 5") == ["2 + 2 = 5"]
    assert false_equations("2 + 2 = 5 0x10") == ["2 + 2 = 5"]
    # a times ``x`` between digits is still times
    assert false_equations("3x8 = 25") == ["3x8 = 25"]
    assert false_equations("10x10 = 1000") == ["10x10 = 1000"]


def test_digits_of_other_scripts_are_read_as_their_value() -> None:
    assert false_equations("٢ + ٣ = ٥") == []
    assert false_equations("٢ + ٣ = ٦") == ["٢ + ٣ = ٦"]


def test_the_bounds_are_where_the_docstring_says() -> None:
    at = "1" * (equations._MAX_NUMBER_CHARS - 1) + "2"  # longest number still evaluated
    past = "1" + at
    assert false_equations(f"{at} + 1 = 5") == [f"{at} + 1 = 5"]
    assert false_equations(f"{past} + 1 = 5") == []
    assert false_equations(f"1 + 1 = {past}") == []
    # a line at the limit is checked, one character longer is not
    pad = " " * (equations._MAX_LINE_CHARS - len("2 + 2 = 5"))
    assert false_equations(pad + "2 + 2 = 5") == ["2 + 2 = 5"]
    assert false_equations(pad + " 2 + 2 = 5") == []
    # the line limit is per line: the short lines around a long one are still checked
    assert false_equations("1 + 1 = 3\n" + pad + " 2 + 2 = 5\n3 + 3 = 7") == [
        "1 + 1 = 3",
        "3 + 3 = 7",
    ]
    # brackets nested to the bound are read, one deeper is not
    deep = equations._MAX_NESTING
    assert false_equations("(" * deep + "1 + 1" + ")" * deep + " = 3") != []
    assert false_equations("(" * (deep + 1) + "1 + 1" + ")" * (deep + 1) + " = 3") == []
    assert false_equations("1 + " + "-" * deep + "1 = 5") == ["1 + " + "-" * deep + "1 = 5"]
    assert false_equations("1 + " + "-" * (deep + 1) + "1 = 5") == []


ALPHABET = [*"0123456789+-*/=()$,. \nx", "×", "÷", "−", "٣", "0x", "e9", "**", "\\times"]
# runs of one character: numbers past the int limit, deep brackets, long lines
RUNS = st.builds(lambda n, c: c * n, st.integers(1, 6_000), st.sampled_from("(-)= 19٣"))
NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.from_regex(r"\A[0-9]{1,60}(\.[0-9]{1,60})?\Z"),
    # around Python's limit on converting a string to an int (4,300 digits)
    st.builds(lambda n, d: d * n, st.integers(4_000, 6_000), st.sampled_from("19٣𝟐")),
    st.sampled_from(["0x10", "0XFF", "0b101", "0o17", "1e999999", "nan", "inf", "$1,000", "1,5"]),
)
EQUATIONS = st.builds(
    lambda a, op, b, c: f"{a} {op} {b} = {c}", NUMBERS, st.sampled_from("+-*/x×÷"), NUMBERS, NUMBERS
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(ALPHABET),
            st.text(max_size=3),  # any code point, surrogates and controls included
            RUNS,
            EQUATIONS,
        ),
        max_size=30,
    ).map("".join)
)
def test_any_text_returns_spans_of_itself_and_never_raises(text: str) -> None:
    found = false_equations(text)
    assert all(span in text and "=" in span for span in found)
    assert states_false_equation(text) == bool(found)


class _CountingText(str):
    """A text that counts the characters read out of it by indexing and slicing."""

    read = 0

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        part = super().__getitem__(key)
        _CountingText.read += len(part)
        return part


class _CountingPattern:
    """The tokenizer's pattern, counting the characters each scan covers."""

    scanned = 0

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def finditer(
        self, text: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        _CountingPattern.scanned += min(endpos, len(text)) - pos
        return self.pattern.finditer(text, pos, endpos)


@pytest.mark.parametrize(
    "line",
    [
        "Step 2: Carla has 7 - 9 = 1 sticker, so 1 + 1 = 3.   ",  # prose, every line checked
        "1+1=3 ",  # arithmetic with no end: one run far past the token bound
        "(" * 195 + "1+1 = 3; ",  # runs at the token bound, all brackets to trim
        "Then" + " " * 200 + "-1 + 1 = 3, ",  # long white space before each left side
    ],
)
def test_the_work_is_linear_in_the_text(monkeypatch: pytest.MonkeyPatch, line: str) -> None:
    # Counted, not timed: every character is tokenized once at most and read out of the
    # text a bounded number of times, however many equations share a line, so a text of
    # any size costs a bounded time per character (about a second for 2 MB of the worst
    # of these on one core; the counting itself makes this test slower).  Slicing the
    # text before each equation, as the checker once did, read some 10 GB for a megabyte.
    monkeypatch.setattr(equations, "_TOKEN", _CountingPattern(equations._TOKEN))
    depth, bracketed = equations._depth, [0]

    def counting_depth(side: list[equations._Token]) -> int:
        bracketed[0] += len(side)  # tokens looked at for their brackets
        return depth(side)

    monkeypatch.setattr(equations, "_depth", counting_depth)
    monkeypatch.setattr(_CountingText, "read", 0)
    monkeypatch.setattr(_CountingPattern, "scanned", 0)
    per_line = max(1, equations._MAX_LINE_CHARS // len(line) // 2)  # long lines, under the bound
    text = _CountingText(((line * per_line) + "\n") * (1_000_000 // (len(line) * per_line)))
    assert len(text) > 900_000
    false_equations(text)
    assert _CountingPattern.scanned <= len(text)
    assert _CountingText.read <= 3 * len(text)
    assert bracketed[0] <= 2 * len(text)
