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

What is never evaluated, so never flagged (model text is untrusted: whatever it holds,
the checker returns, in time linear in the text, and never raises):

* a number written in another base, ``0x10``, ``0b101``, ``0o17``: ``0x10 + 1 = 17`` is
  not read as ``0 x 10 + 1``; such a number stops an expression like a word does;
* an equation with a number longer than `_MAX_NUMBER_CHARS` characters, parentheses or
  signs nested deeper than `_MAX_NESTING`, or more than `_MAX_TOKENS` tokens in its run;
* a line longer than `_MAX_LINE_CHARS` characters.

Digits of other scripts (``٢ + ٣ = ٥``) are read like ASCII ones, as Python reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import NamedTuple

_TOKEN = re.compile(
    r"""
    (?P<latex>\\(?:times|cdot|div)(?![A-Za-z]))
    | (?P<bold>\*\*)
    | (?P<based>\$?0[xXbBoO][0-9A-Fa-f][0-9A-Za-z_]*)
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
_MAX_TOKENS = 200  # a longer "expression" is not a step's arithmetic
# A step's numbers have a few digits.  Past 40 characters a number is not a quantity a
# word problem counts, and the bound keeps the exact arithmetic of an equation small (at
# most _MAX_TOKENS such numbers multiplied) and far below Python's limit on converting a
# string to an int (4,300 digits, a ValueError past it).
_MAX_NUMBER_CHARS = 40
# A step is one line, at most a step's token cap of text (8,192 tokens in the largest
# configs, some 40,000 characters).  A longer line is not tokenized at all, so one line's
# token list, the checker's only memory that grows with the text, stays bounded.
_MAX_LINE_CHARS = 100_000
# Brackets and signs a step nests are a few deep; the bound keeps the recursive parser far
# from Python's recursion limit whatever the caller's stack depth.
_MAX_NESTING = 16


class _Token(NamedTuple):  # a tuple: cheaper to build than a frozen dataclass
    kind: str  # num, op, paren or eq: what a run is made of
    text: str
    start: int
    end: int


def false_equations(text: str) -> list[str]:
    """The equations `text` states whose right side is provably wrong, as written."""
    return list(_false_equations(text))


def states_false_equation(text: str) -> bool:
    """Does `text` state at least one provably false equation?"""
    return any(True for _ in _false_equations(text))


def _false_equations(text: str) -> Iterator[str]:
    """Line by line: a line break ends an expression, so a line is checked on its own (its
    tokens only), and every look at the text around a token reads a few characters, so
    the work is linear in the text."""
    start = 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if end - start <= _MAX_LINE_CHARS and text.find("=", start, end) >= 0:
            yield from _false_in_line(text, start, end)
        start = end + 1


def _false_in_line(text: str, start: int, end: int) -> Iterator[str]:
    for run in _runs(text, start, end):
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
                yield text[lhs[0].start : rhs[-1].end]


_Raw = tuple[str, str, int, int]  # kind (the regex group), text, start, end
_EXPRESSION = frozenset(("latex", "op", "paren", "eq", "num"))


def _runs(text: str, start: int, end: int) -> list[list[_Token]]:
    """The runs of the line ``text[start:end]`` that hold an ``=``, two numbers (a left
    side needs them) and at most `_MAX_TOKENS` tokens: maximal stretches of numbers,
    operators, parentheses and ``=`` (white space dropped).  Anything else ends a run:
    words, other characters, ``**``, a number in another base, a number glued to a
    letter, an ``x`` not between two numbers.  Tokens are built only for the runs
    returned: a line of runs that cannot hold a false equation costs one pass over its
    matches."""
    raw: list[_Raw] = [
        (m.lastgroup or "other", m.group(), m.start(), m.end())
        for m in _TOKEN.finditer(text, start, end)
        if m.lastgroup != "space"
    ]
    times = {i for i, t in enumerate(raw) if t[1] in ("x", "X") and _times(raw, i)}
    spans: list[tuple[int, int]] = []
    first, has_eq, numbers = 0, False, 0
    for i, (kind, _, begin, finish) in enumerate(raw):
        if kind == "num":
            # ``2x``, ``5cm``, ``x2``: a number touching a word is algebra or a unit,
            # unless the word is a times ``x`` (``3x8``)
            before = raw[i - 1] if i > 0 else None
            after = raw[i + 1] if i + 1 < len(raw) else None
            stop = (
                before is not None
                and before[0] == "word"
                and before[3] == begin
                and i - 1 not in times
            ) or (
                after is not None
                and after[0] == "word"
                and after[2] == finish
                and i + 1 not in times
            )
        else:
            stop = kind not in _EXPRESSION and i not in times
        if stop:
            if has_eq and numbers >= 2 and i - first <= _MAX_TOKENS:
                spans.append((first, i))
            first, has_eq, numbers = i + 1, False, 0
        elif kind == "eq":
            has_eq = True
        elif kind == "num":
            numbers += 1
    if has_eq and numbers >= 2 and len(raw) - first <= _MAX_TOKENS:
        spans.append((first, len(raw)))
    return [[_token(raw[i], i in times) for i in range(a, b)] for a, b in spans]


def _token(raw: _Raw, times: bool) -> _Token:
    kind, value, start, end = raw
    if times:
        return _Token("op", "*", start, end)
    if kind in ("latex", "op"):
        return _Token("op", _OPERATOR.get(value, value), start, end)
    return _Token(kind, value, start, end)  # num, paren or eq


def _times(raw: list[_Raw], i: int) -> bool:
    """An ``x`` between a number (or ``)``) and a number (or ``(``) means times."""
    if i == 0 or i + 1 == len(raw):
        return False
    before, after = raw[i - 1], raw[i + 1]
    return (before[0] == "num" or before[1] == ")") and (after[0] == "num" or after[1] == "(")


def _trim_open(side: list[_Token]) -> list[_Token]:
    """Drop the ``(`` that opens a parenthetical aside: ``(3 + 4 = 7)``."""
    depth, cut = _depth(side), 0
    # each ``(`` dropped lowers the depth by one: one count, not one per bracket
    while cut < len(side) and side[cut].text == "(" and depth > 0:
        depth, cut = depth - 1, cut + 1
    return side[cut:]


def _trim_close(side: list[_Token]) -> list[_Token]:
    depth, cut = _depth(side), len(side)
    while cut > 0 and side[cut - 1].text == ")" and depth < 0:
        depth, cut = depth + 1, cut - 1
    return side[:cut]


def _depth(side: list[_Token]) -> int:
    return sum(t.text == "(" for t in side) - sum(t.text == ")" for t in side)


def _clean_start(text: str, lhs: list[_Token]) -> bool:
    """The left side starts a sum of its own: not glued to a symbol before it, and a
    leading minus is a sign glued to its number, not a subtraction from a word."""
    first = lhs[0]
    if first.start > 0 and text[first.start - 1] in _GLUE_BEFORE:
        return False
    # the text before it without its trailing white space ends at `cut`; scanning back
    # (not slicing the text before it) keeps each look at the white space right before
    # one token, so a line of many equations costs no more than its length
    cut = first.start
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    last = text[cut - 1] if cut > 0 else ""
    second = text[cut - 2] if cut > 1 else ""
    if second.isdigit() and last in _DIGIT_JOINERS and first.start == cut:
        return False
    if first.kind == "op":
        glued = len(lhs) > 1 and lhs[1].start == first.end
        return first.text == "-" and glued and not last.isalnum()
    return True


def _clean_end(text: str, rhs: list[_Token]) -> bool:
    after = text[rhs[-1].end : rhs[-1].end + 2]
    if after[:1] in _DIGIT_JOINERS and after[1:].isdigit():
        return False
    return not after or after[0] not in _GLUE_AFTER


def _is_false(lhs: list[_Token], rhs: list[_Token]) -> bool:
    if sum(t.kind == "num" for t in lhs) < 2:
        return False
    if any(t.kind == "num" and len(t.text) > _MAX_NUMBER_CHARS for t in (*lhs, *rhs)):
        return False
    right = _signed_number(rhs)
    if right is None:
        return False
    try:
        left = _Parser(lhs).value()
    except (ValueError, ArithmeticError, RecursionError):  # no value: nothing is proved
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
        self.depth = 0  # brackets and signs open around the factor being read

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
        if token.kind == "num":
            return Fraction(token.text.lstrip("$").replace(",", ""))
        if token.text not in ("+", "-", "("):
            raise ValueError(f"unexpected {token.text!r}")
        self.depth += 1
        if self.depth > _MAX_NESTING:
            raise ValueError("nested too deep")
        if token.text == "(":
            inner = self._expr()
            if self._take().text != ")":
                raise ValueError("unclosed parenthesis")
        else:
            inner = self._factor()
            inner = inner if token.text == "+" else -inner
        self.depth -= 1
        return inner


__all__ = ["false_equations", "states_false_equation"]
