"""The text a training row holds for a trajectory: it ends where its answer ends.

A node's raw text keeps whatever the model wrote after its answer (SmolLM2
states "The answer is 19." and goes on inventing a new "Problem:" with its own
answer), and TRL trains on every token of a completion.  So every training row
(sft completion, dpo chosen and rejected, kto completion, prm steps, step_dpo)
is the trajectory cut right after the answer statement that extraction read
(`search.answers.answer_span`: the sentence of the ``\\boxed{}``, or of "answer
is"); `nodes` and `tree_nodes` keep the raw text.

``truncated``: the token cap stopped the node inside that sentence, so the row
would end mid-sentence (by default such a trajectory gives no training row).

With ``fold_blank_lines`` the text folds runs of blank lines into one line
break: a step of the prm and step_dpo records is one line, and no step may be
empty (TRL's PRM trainer labels a step's last token).
"""

from __future__ import annotations

from dataclasses import dataclass

from search.answers import AnswerExtraction, answer_span, answer_statements
from search.protocols import FinishReason
from search.step_text import tidy
from search.tree import Node, Tree


@dataclass(frozen=True, slots=True)
class TrainingText:
    """A trajectory as training rows hold it."""

    text: str  # cut after the answer statement, trailing white space dropped
    dropped_chars: int  # characters of the raw trajectory dropped after the statement
    truncated: bool  # the token cap cut the node inside its answer sentence
    statements: int  # answer statements in `text` (a clean solution: 1)

    @property
    def lines(self) -> list[str]:
        """The steps of the prm and step_dpo records: the lines of `text`."""
        return self.text.split("\n")


def training_text(
    tree: Tree,
    node: Node,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
    fold_blank_lines: bool = True,
) -> TrainingText:
    """The training text of the trajectory ending at answered `node` (rules above)."""
    before = tree.assistant_text(tree[node.parent_id]) if node.parent_id is not None else ""
    raw = before + node.segment
    span = answer_span(node.text, extraction)
    if span is None:  # answered by its natural end, no statement: nothing after it
        cut, closed = raw, True
    else:
        cut = before + node.inserted_text + node.text[: span.end]
        closed = span.closed
    text = tidy(cut, fold_blank_lines)
    truncated = not closed and node.finish is FinishReason.LENGTH
    dropped = len(raw.rstrip()) - len(cut.rstrip())
    return TrainingText(text, dropped, truncated, len(answer_statements(text)))


def line_owners(tree: Tree, node: Node, text: str) -> list[Node]:
    """For each line of `text` (a training text of `node`'s path), the path node whose
    text holds the line's end: a line labelled from a node is judged by that node."""
    path = tree.path(node)
    ends: list[int] = []  # where each path node's text ends in the raw trajectory
    position = len(tree.response_prefix)
    for step in path:
        position += len(step.segment)
        ends.append(position)
    owners: list[Node] = []
    raw = tree.assistant_text(node)
    cursor = 0  # in `raw`; `text` is `raw` cut, stripped and with blank lines folded
    k = 0
    for line in text.split("\n"):
        found = raw.find(line, cursor) if line else cursor
        cursor = (found if found >= 0 else cursor) + len(line)
        while k < len(path) - 1 and ends[k] < cursor:
            k += 1
        owners.append(path[k])
    return owners


__all__ = ["TrainingText", "line_owners", "tidy", "training_text"]
