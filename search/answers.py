"""Answer detection and extraction (paper, Appendix A).

A node is *answered* when its text matches ``answer is(.*)\\boxed\\{.*?\\}`` or
its generation ended naturally (end of sequence, not the step boundary, not
the length limit).  The answer is the content of the last ``\\boxed{...}``,
read with balanced braces so nested LaTeX such as ``\\frac{1}{2}`` survives.

`AnswerExtraction.LAST_NUMBER` is not from the paper: for weak models that never
write ``\\boxed{}`` (SmolLM2-135M ends with "So the answer is 8.").  It relaxes
Appendix A's rule by dropping the box: a node is also answered when its text says
"answer is" followed by a number, and an answered node without a box takes the
number its text states after its first "answer is" as its answer (SmolLM2 often
keeps writing after "The answer is 17.", e.g. a new made-up problem with other
numbers), else the last number of its own text.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from search.protocols import FinishReason

ANSWER_PATTERN = re.compile(r"answer is(.*)\\boxed\{.*?\}")
_BOXED = "\\boxed"
# A whole, decimal or simple fraction number; thousands separators allowed ("1,080").
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+)?")
# "The answer is: 18", "the answer is $18$" (LAST_NUMBER mode only)
PLAIN_ANSWER = re.compile(r"answer is\W{0,4}-?\d", re.IGNORECASE)
_STATED = re.compile(r"answer is\W{0,4}(?=-?\d)", re.IGNORECASE)
# Where a stated answer's sentence ends: a line break, or a period not inside a number.
_SENTENCE_END = re.compile(r"\n|\.(?!\d)")


class AnswerExtraction(enum.StrEnum):
    BOXED = "boxed"  # Appendix A: the last \boxed{...}
    # the last \boxed{...}, else the number after the first "answer is", else the last number
    LAST_NUMBER = "last_number"


def extract_answer(text: str, mode: AnswerExtraction = AnswerExtraction.BOXED) -> str | None:
    """The answer of an answered node's own text under `mode`."""
    boxed = extract_boxed(text)
    if boxed is not None or mode is AnswerExtraction.BOXED:
        return boxed
    return extract_stated_number(text)


def extract_stated_number(text: str) -> str | None:
    """The answer a text states: the last number of the sentence after its first "answer
    is" (as `PLAIN_ANSWER` reads it), else the last number of `text`.

    SmolLM2 often goes on after stating its answer, inventing a new problem with other
    numbers (and other "answer is" lines), so the first statement is the node's answer:
    "The answer is 17.\n\nProblem: ... The answer is 20." -> "17";
    "The answer is 4 x 3 = 12 books. Then ..." -> "12".
    """
    stated = _STATED.search(text)
    if stated is None:
        return extract_last_number(text)
    sentence = _SENTENCE_END.split(text[stated.end() :], maxsplit=1)[0]
    return extract_last_number(sentence)


def extract_last_number(text: str) -> str | None:
    """The last number in `text` ("1,080" -> "1080", "3/4" kept), else None."""
    matches = _NUMBER.findall(text)
    return matches[-1].replace(",", "") if matches else None


@dataclass(frozen=True, slots=True)
class AnswerSpan:
    """Where the answer statement that `extract_answer` read ends in a node's text.

    `end`: the index just past the statement's sentence (its period kept, a line
    break left out); `closed`: False when that sentence runs to the end of the
    text (the generation stopped inside it, e.g. at the token cap).
    """

    end: int
    closed: bool


def answer_span(text: str, mode: AnswerExtraction = AnswerExtraction.BOXED) -> AnswerSpan | None:
    """The end of the statement `extract_answer(text, mode)` read, else None.

    The statement is the sentence of the last complete ``\\boxed{}``; in
    `LAST_NUMBER` mode without a box, the sentence after the first "answer is",
    else the sentence of the last number.  Training rows end there: what a model
    writes after its answer (SmolLM2 invents a new problem) is not the solution.
    """
    box = _last_box(text)
    if box is not None:
        return _sentence_end(text, box[1])
    if mode is AnswerExtraction.BOXED:
        return None
    stated = _STATED.search(text)
    if stated is not None:
        return _sentence_end(text, stated.end())
    numbers = list(_NUMBER.finditer(text))
    return _sentence_end(text, numbers[-1].end()) if numbers else None


def _sentence_end(text: str, start: int) -> AnswerSpan:
    found = _SENTENCE_END.search(text, start)
    if found is None:
        return AnswerSpan(len(text), closed=False)
    return AnswerSpan(found.end() if found.group() == "." else found.start(), closed=True)


# One sentence that states an answer: a box, or "answer is" and a number.
_STATEMENT = re.compile(r"\\boxed\s*\{|answer is\W{0,4}-?\d", re.IGNORECASE)


def answer_statements(text: str) -> list[str]:
    """The sentences of `text` that state an answer (a ``\\boxed{}``, or "answer is" and a
    number), in order: a clean solution has one, its last."""
    sentences = _SENTENCE_END.split(text)
    return [s for s in sentences if _STATEMENT.search(s)]


def stated_answers(text: str, mode: AnswerExtraction = AnswerExtraction.BOXED) -> list[str]:
    """Every answer `text` states: each statement sentence's answer, and what
    `extract_answer` reads from the whole text (distinct, in order)."""
    found = [extract_answer(s, AnswerExtraction.LAST_NUMBER) for s in answer_statements(text)]
    found.append(extract_answer(text, mode))
    return list(dict.fromkeys(a for a in found if a))


def is_answered(text: str, finish: FinishReason, mode: AnswerExtraction | None = None) -> bool:
    """Appendix A: the answer pattern matches, or the generation ended naturally.

    With `AnswerExtraction.LAST_NUMBER`, "answer is <number>" without a box counts too.
    """
    if finish is FinishReason.EOS or ANSWER_PATTERN.search(text) is not None:
        return True
    return mode is AnswerExtraction.LAST_NUMBER and PLAIN_ANSWER.search(text) is not None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces, else None.

    An unclosed last box (generation cut mid-answer) falls back to the previous
    complete one.
    """
    box = _last_box(text)
    return None if box is None else box[0].strip()


def _last_box(text: str) -> tuple[str, int] | None:
    """(content, index past the closing brace) of the last complete box."""
    start = text.rfind(_BOXED)
    while start != -1:
        group = _balanced_group(text, start + len(_BOXED))
        if group is not None:
            return group
        start = text.rfind(_BOXED, 0, start)
    return None


def _balanced_group(text: str, pos: int) -> tuple[str, int] | None:
    while pos < len(text) and text[pos] == " ":
        pos += 1
    if pos >= len(text) or text[pos] != "{":
        return None
    depth = 0
    for i in range(pos, len(text)):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            continue
        if char == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif char == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[pos + 1 : i], i + 1
    return None
