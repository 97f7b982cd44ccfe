"""`false_equations` on the step text SmolLM2 writes: it flags the arithmetic that provably
does not hold, and nothing it cannot read (algebra, units, exponents, LaTeX, times)."""

from __future__ import annotations

import pytest

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
