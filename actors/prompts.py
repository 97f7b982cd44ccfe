"""Prompts, with the structure of the paper's Appendix E in our own words.

Policy: one user turn (instruction ending in the required answer line, one
worked example, the problem); the assistant turn is prefilled by the search
("Step 1:" and the path so far) and continued by the model.

GenPRM: a system prompt casting the model as a teacher who critiques a
solution paragraph by paragraph; the problem and each step as successive user
turns; the model's own earlier critiques as the assistant turns.

`PromptConfig` replaces either prompt from a run config, inline or from a file
(e.g. the exact prompts of the paper's App. E); our wording stays the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from search.strict_config import StrictConfig

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


def policy_messages(
    problem: str, assistant_prefix: str, instruction: str = POLICY_INSTRUCTION
) -> list[dict[str, str]]:
    """The chat to render with the model's template, the assistant turn left open.

    `instruction` is a template with one `{problem}` field (literal braces doubled).
    """
    return [
        {"role": "user", "content": instruction.format(problem=problem)},
        {"role": "assistant", "content": assistant_prefix},
    ]


def check_problem_template(template: str, name: str) -> None:
    """Raise ValueError (naming `name`) unless `template`'s only field is {problem}."""
    try:
        template.format(problem="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"{name}: must be a template whose only field is {{problem}} "
            f"(double literal braces): {type(exc).__name__}: {exc}"
        ) from None
    if "{problem}" not in template:
        raise ValueError(f"{name}: has no {{problem}} field")


class PromptConfig(StrictConfig):
    """Prompts of a service, each inline or from a file (`*_file`, read when the config loads).

    `policy_instruction`: the policy's user turn (instruction and worked example)
    with a `{problem}` field; `prm_system`: GenPRM's system prompt.  Unset: ours.
    """

    policy_instruction: str = Field(
        POLICY_INSTRUCTION,
        description="the policy's user turn, a template whose only field is {problem} "
        "(literal braces doubled); or policy_instruction_file: a path to read it from; "
        "default: our App. E-style prompt",
    )
    policy_stop: tuple[str, ...] = Field(
        (),
        description="stop strings that end the policy's solution, added to every request: "
        "text the prompt's format puts after a solution (a few-shot prompt's next "
        "'Problem:'); a generation that meets one ended naturally (finish eos), as at the "
        "end of sequence",
    )
    prm_system: str = Field(
        PRM_SYSTEM,
        description="GenPRM's system prompt; or prm_system_file: a path to read it from; "
        "default: our App. E-style prompt",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_files(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for field in ("policy_instruction", "prm_system"):
            path = data.pop(f"{field}_file", None)
            if path is None:
                continue
            if field in data:
                raise ValueError(f"{field}: give it inline or as {field}_file, not both")
            try:
                data[field] = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"{field}_file: cannot read {path!r}: {exc.strerror}") from None
        return data

    @model_validator(mode="after")
    def _check_template(self) -> PromptConfig:
        check_problem_template(self.policy_instruction, "policy_instruction")
        if any(not stop for stop in self.policy_stop):
            raise ValueError("policy_stop: an empty stop string would end every generation")
        return self
