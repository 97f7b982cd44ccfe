"""How a path's text becomes steps: the pure rules the scorers and the training rows share.

The training rows (`pipeline.records.training_text`) and a one-pass PRM scoring a node
(`actors.one_pass`) must cut a path into the very same steps, or the PRM is served text
laid out unlike the rows it was trained on; GenPRM (`actors.genprm`) and the one-pass
PRM's ``steps: step_labels`` read a path as its "Step N:" paragraphs.  Both rules live
here, below every layer that uses them.
"""

from __future__ import annotations

import re

_BLANK_LINES = re.compile(r"\n[ \t]*(?=\n)")


def tidy(text: str, fold_blank_lines: bool = True) -> str:
    """A training text's form: trailing white space dropped, blank lines folded."""
    text = text.rstrip()
    return _BLANK_LINES.sub("", text) if fold_blank_lines else text


def text_lines(text: str) -> list[str]:
    """The steps of the prm records: the lines of `text` in its training form (`tidy`)."""
    return tidy(text).split("\n")


def split_steps(
    segment: str, *, first: bool, boundary: str = "\nStep", first_label: str = "Step 1:"
) -> list[str]:
    """The steps (GenPRM: one user turn each) of one node's segment.

    The segment is cut before every `boundary` ("\\nStep"); each piece loses the
    leading newline so it reads "Step N: ...".  The first segment of a path
    follows the search's prefilled `first_label` ("Step 1:"), which is put back.
    A later segment may open with inserted text (the continuation prompt "But
    wait, ...") before its first boundary: that text stays with the step that
    follows it, as it does for a sequential node.  A sequential segment never
    contains the boundary past its start (generation stops there), so it is
    always exactly one step; a full-generation segment gives one step per
    "Step N:" paragraph.
    """
    pieces = re.split(f"(?={re.escape(boundary)})", segment)
    if first:
        pieces[0] = first_label + pieces[0]  # never blank: the label is part of the step
    elif len(pieces) > 1 and not pieces[0].startswith(boundary):
        head = pieces.pop(0)
        if head.strip():
            pieces[0] = head + pieces[0]
    steps = [piece.strip() for piece in pieces if piece.strip()]
    return steps or [segment.strip()]  # an empty node is still one (empty) step


__all__ = ["split_steps", "text_lines", "tidy"]
