"""Arithmetic a step states that is provably false: ``Carla has 7 - 9 = 1 sticker.``

A small model often reaches the right final answer through a wrong step, and such a
path must not be trained on as a good one.  `false_equations` finds the equations a
text states in the form ``<arithmetic expression> = <number>``, works out the left side
exactly (fractions, no floats, no ``eval``) and returns those whose right side is wrong.

What counts as an equation (everything else is skipped, never reported: the checker only
flags what it can prove wrong):

* numbers: ``14``, ``1,200`` (thousands commas), ``2.5``, ``$300`` (a ``$`` glued to the
  number is currency); a number glued to a letter (``2x``, ``5cm``, ``x2``) is not a
  number here, it is algebra or a unit we cannot read;
* operators: ``+ - * / x X × · ÷ −`` and LaTeX ``\\times \\cdot \\div``, with
  parentheses; ``x``/``X`` is "times" only between two numbers (``3 x 8``), elsewhere a
  variable; ``**`` is Markdown bold around an equation, not a power;
* the left side has at least two numbers (``1 dozen = 12`` or ``$1 = 100 cents`` are
  unit statements, not sums) and starts with a number, a ``(`` or a minus sign glued to
  its number (``x - 2 = 3`` is about a variable, so it is skipped); the character right
  before it may not glue it to something else (``3^2 + 1 = 10``: an exponent);
* the right side is one number, optionally negative, followed by words, punctuation or
  nothing (``9 - 4 = 5 cards``); ``12 * 3 = 36 + 1`` (more arithmetic on the right) or
  ``= 3/4`` is not checked;
* a chain ``a + b = c = d`` is read pairwise: each ``=`` is checked with the expression
  right before it and the number right after it, so the running total
  ``12 * 3 = 36 + 1 = 37`` checks ``36 + 1 = 37`` and skips ``12 * 3 = 36 + 1``;
* ``==``, ``<=``, ``>=``, ``!=`` and ``:=`` are not equations.

False means ``|lhs - rhs| > 1e-6 * max(1, |rhs|)``, except that a right side written
with decimals may be the left side rounded to that many places (``10 / 3 = 3.33`` is
true as written).  A left side without a value (a division by zero) is skipped, not
reported: the checker compares two values, and there is only one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_TOKEN = re.compile(
    r"""
    (?P<latex>\\(?:times|cdot|div)(?![A-Za-z]))
    | (?P<bold>\*\*)
    | (?P<num>\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)
    | (?P<op>[-+*/×÷−·⋅])
    | (?P<paren>[()])
    | (?P<eq>(?<![=<>!:])=(?!=))
    | (?P<word>[A-Za-z_]+)
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_OPERATOR = {"×": "*", "·": "*", "⋅": "*", "÷": "/", "−": "-"}
_OPERATOR |= {r"\times": "*", r"\cdot": "*", r"\div": "/"}
# a character right before a left side that glues it to something we cannot read
# (``3^2``, ``a_1``, ``\frac{6}{3}``, ``|x|``, ``f(x)``, ``.5``)
_GLUE_BEFORE = set("^_}])|\\.")
# a character right after a right side that makes it more than a number (``2^3``, ``50%``)
_GLUE_AFTER = set("^_%\\{([")
# between two digits these make one thing we do not read as numbers: a time (``2:30``),
# a decimal comma (``1,5``)
_DIGIT_JOINERS = set(":,.")
_MAX_TOKENS = 200  # a longer "expression" is not a step's arithmetic; and bounds recursion


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # num, op, paren, eq or stop (anything that ends an expression)
    text: str
    start: int
    end: int


def false_equations(text: str) -> list[str]:
    """The equations `text` states whose right side is provably wrong, as written."""
    tokens = _tokens(text)
    found: list[str] = []
    for run in _runs(tokens):
        eqs = [i for i, t in enumerate(run) if t.kind == "eq"]
        bounds = [-1, *eqs, len(run)]
        for k, eq in enumerate(eqs):
            lhs = _trim_open(run[bounds[k] + 1 : eq])
            rhs = _trim_close(run[eq + 1 : bounds[k + 2]])
            if not lhs or not rhs:
                continue
            if k == 0 and not _clean_start(text, lhs):
                continue
            if k == len(eqs) - 1 and not _clean_end(text, rhs):
                continue
            if _is_false(lhs, rhs):
                found.append(text[lhs[0].start : rhs[-1].end])
    return found


def states_false_equation(text: str) -> bool:
    """Does `text` state at least one provably false equation?"""
    return bool(false_equations(text))


def _tokens(text: str) -> list[_Token]:
    """Numbers, operators, parentheses and ``=``; words and other characters as ``stop``
    (white space dropped).  A number glued to a letter and an ``x`` that is not between
    two numbers are stops too."""
    raw = [
        (m.lastgroup or "other", m.group(), m.start(), m.end())
        for m in _TOKEN.finditer(text)
        # a line break ends an expression (a step is a line); other white space is dropped
        if m.lastgroup != "space" or "\n" in m.group()
    ]
    times = {i for i, t in enumerate(raw) if t[1] in ("x", "X") and _times(raw, i)}
    out: list[_Token] = []
    for i, (kind, value, start, end) in enumerate(raw):
        if i in times:
            kind, value = "op", "*"
        elif kind == "num" and _glued_to_word(raw, i, times):
            kind = "stop"
        elif kind in ("latex", "op"):
            kind, value = "op", _OPERATOR.get(value, value)
        elif kind not in ("paren", "eq", "num"):  # words, line breaks, ``**``, other symbols
            kind = "stop"
        out.append(_Token(kind, value, start, end))
    return out


_Raw = tuple[str, str, int, int]  # kind, text, start, end


def _times(raw: list[_Raw], i: int) -> bool:
    """An ``x`` between a number (or ``)``) and a number (or ``(``) means times."""
    if i == 0 or i + 1 == len(raw):
        return False
    before, after = raw[i - 1], raw[i + 1]
    return (before[0] == "num" or before[1] == ")") and (after[0] == "num" or after[1] == "(")


def _glued_to_word(raw: list[_Raw], i: int, times: set[int]) -> bool:
    """``2x``, ``5cm``, ``x2``: a number touching a word, unless the word is a times ``x``
    (``3x8``)."""
    _, _, start, end = raw[i]
    for j in (i - 1, i + 1):
        touching = 0 <= j < len(raw) and (raw[j][3] == start or raw[j][2] == end)
        if touching and raw[j][0] == "word" and j not in times:
            return True
    return False


def _runs(tokens: list[_Token]) -> list[list[_Token]]:
    """Maximal stretches of expression tokens, split at every stop token."""
    runs: list[list[_Token]] = [[]]
    for t in tokens:
        if t.kind == "stop":
            runs.append([])
        else:
            runs[-1].append(t)
    return [r for r in runs if any(t.kind == "eq" for t in r) and len(r) <= _MAX_TOKENS]


def _trim_open(side: list[_Token]) -> list[_Token]:
    """Drop the ``(`` that opens a parenthetical aside: ``(3 + 4 = 7)``."""
    while side and side[0].text == "(" and _depth(side) > 0:
        side = side[1:]
    return side


def _trim_close(side: list[_Token]) -> list[_Token]:
    while side and side[-1].text == ")" and _depth(side) < 0:
        side = side[:-1]
    return side


def _depth(side: list[_Token]) -> int:
    return sum(t.text == "(" for t in side) - sum(t.text == ")" for t in side)


def _clean_start(text: str, lhs: list[_Token]) -> bool:
    """The left side starts a sum of its own: not glued to a symbol before it, and a
    leading minus is a sign glued to its number, not a subtraction from a word."""
    first = lhs[0]
    before = text[: first.start].rstrip()
    if first.start > 0 and text[first.start - 1] in _GLUE_BEFORE:
        return False
    if before[-2:-1].isdigit() and before[-1:] in _DIGIT_JOINERS and first.start == len(before):
        return False
    if first.kind == "op":
        glued = len(lhs) > 1 and lhs[1].start == first.end
        return first.text == "-" and glued and not (before and before[-1].isalnum())
    return True


def _clean_end(text: str, rhs: list[_Token]) -> bool:
    after = text[rhs[-1].end : rhs[-1].end + 2]
    if after[:1] in _DIGIT_JOINERS and after[1:].isdigit():
        return False
    return not after or after[0] not in _GLUE_AFTER


def _is_false(lhs: list[_Token], rhs: list[_Token]) -> bool:
    if sum(t.kind == "num" for t in lhs) < 2:
        return False
    right = _signed_number(rhs)
    if right is None:
        return False
    try:
        left = _Parser(lhs).value()
    except (ValueError, ZeroDivisionError):
        return False
    value, places = right
    gap = abs(left - value)
    if gap <= Fraction(1, 10**6) * max(Fraction(1), abs(value)):
        return False
    # a right side written with decimals may be the left side rounded to them
    return not (places and gap <= Fraction(1, 2 * 10**places))


def _signed_number(side: list[_Token]) -> tuple[Fraction, int] | None:
    """The right side's value and decimal places, when it is one (signed) number."""
    sign = 1
    if len(side) == 2 and side[0].text == "-":
        sign, side = -1, side[1:]
    if len(side) != 1 or side[0].kind != "num":
        return None
    digits = side[0].text.lstrip("$").replace(",", "")
    places = len(digits.partition(".")[2])
    return sign * Fraction(digits), places


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := ('+'|'-') factor | number | '(' expr ')'.  Raises ValueError when the
    tokens are not one whole expression."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def value(self) -> Fraction:
        result = self._expr()
        if self.i != len(self.tokens):
            raise ValueError("trailing tokens")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.i].text if self.i < len(self.tokens) else None

    def _take(self) -> _Token:
        if self.i >= len(self.tokens):
            raise ValueError("expression ends early")
        self.i += 1
        return self.tokens[self.i - 1]

    def _expr(self) -> Fraction:
        result = self._term()
        while self._peek() in ("+", "-"):
            op = self._take().text
            result = result + self._term() if op == "+" else result - self._term()
        return result

    def _term(self) -> Fraction:
        result = self._factor()
        while self._peek() in ("*", "/"):
            op = self._take().text
            result = result * self._factor() if op == "*" else result / self._factor()
        return result

    def _factor(self) -> Fraction:
        token = self._take()
        if token.text in ("+", "-"):
            inner = self._factor()
            return inner if token.text == "+" else -inner
        if token.kind == "num":
            return Fraction(token.text.lstrip("$").replace(",", ""))
        if token.text == "(":
            inner = self._expr()
            if self._take().text != ")":
                raise ValueError("unclosed parenthesis")
            return inner
        raise ValueError(f"unexpected {token.text!r}")


__all__ = ["false_equations", "states_false_equation"]
