"""Answer detection and extraction (paper, Appendix A).

A node is *answered* when its text matches ``answer is(.*)\\boxed\\{.*?\\}`` or
its generation ended naturally (end of sequence, not the step boundary, not
the length limit).  The answer is the content of the last ``\\boxed{...}``,
read with balanced braces so nested LaTeX such as ``\\frac{1}{2}`` survives.
"""

from __future__ import annotations

import re

from search.protocols import FinishReason

ANSWER_PATTERN = re.compile(r"answer is(.*)\\boxed\{.*?\}")
_BOXED = "\\boxed"


def is_answered(text: str, finish: FinishReason) -> bool:
    """Appendix A: the answer pattern matches, or the generation ended naturally."""
    return finish is FinishReason.EOS or ANSWER_PATTERN.search(text) is not None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces, else None.

    An unclosed last box (generation cut mid-answer) falls back to the previous
    complete one.
    """
    start = text.rfind(_BOXED)
    while start != -1:
        content = _balanced_group(text, start + len(_BOXED))
        if content is not None:
            return content.strip()
        start = text.rfind(_BOXED, 0, start)
    return None


def _balanced_group(text: str, pos: int) -> str | None:
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
                return text[pos + 1 : i]
    return None
