"""Prompts, with the structure of the paper's Appendix E in our own words.

Policy: one user turn (instruction ending in the required answer line, one
worked example, the problem); the assistant turn is prefilled by the search
("Step 1:" and the path so far) and continued by the model.

GenPRM: a system prompt casting the model as a teacher who critiques a
solution paragraph by paragraph; the problem and each step as successive user
turns; the model's own earlier critiques as the assistant turns.
"""

from __future__ import annotations

POLICY_INSTRUCTION = """\
Work out the math problem below one step at a time, briefly and clearly. Begin each step \
on a new line with "Step N:". Your last line must read exactly: \
'Therefore, the final answer is: $\\boxed{{ANSWER}}$. I hope it is correct.' \
where ANSWER is the final number or expression, written in LaTeX.

Example problem:
A baker made 36 muffins in the morning and a third as many in the afternoon. \
How many muffins did the baker make that day?
Example solution:
Step 1: In the morning the baker made 36 muffins.
Step 2: In the afternoon the baker made a third as many: 36 / 3 = 12 muffins.
Step 3: Together that is 36 + 12 = 48 muffins. \
Therefore, the final answer is: $\\boxed{{48}}$. I hope it is correct.

Now solve this problem:
{problem}"""

PRM_SYSTEM = (
    "You are a math teacher. Review the student's solution one paragraph at a time and "
    "critique each paragraph step by step, then judge whether it is correct."
)
PRM_ANALYSIS_PREFIX = "<analyze>\nLet's analyze the Paragraph {index} step by step: "
PRM_ANALYSIS_END = "</analyze>"
PRM_JUDGEMENT_PREFIX = "</analyze>\n<output>\n**Judgement**: $\\boxed{"
PRM_JUDGEMENT_SUFFIX = "}$\n</output>\n"


def policy_messages(problem: str, assistant_prefix: str) -> list[dict[str, str]]:
    """The chat to render with the model's template, the assistant turn left open."""
    return [
        {"role": "user", "content": POLICY_INSTRUCTION.format(problem=problem)},
        {"role": "assistant", "content": assistant_prefix},
    ]
