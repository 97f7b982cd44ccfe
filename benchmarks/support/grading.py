"""Grading a model's answers to held-out problems, as the search grades its own.

A completion generated outside the pipeline (transformers' generate in the TRL venv) is
cut where the policy's requests would have stopped, its answer read with the search's
``answer_extraction`` and compared with the reference by math-verify
(`common.grading.compare_all`): the same rules that label the training rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.grading import Verdict, compare_all
from search.answers import AnswerExtraction, extract_answer


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    """The completion up to the first stop string (what the policy's requests return)."""
    end = min((i for s in stops if s and (i := text.find(s)) >= 0), default=len(text))
    return text[:end]


def grade_now(
    completions: Sequence[str],
    references: Sequence[str],
    *,
    extraction: AnswerExtraction,
    stops: Sequence[str] = (),
    timeout_s: float = 5.0,
) -> list[bool]:
    """Each completion's extracted answer against its reference, with math-verify (from
    code that is not async: a benchmark's main)."""
    answers = [extract_answer(cut_at_stops(c, stops), extraction) for c in completions]
    verdicts = asyncio.run(compare_all(list(zip(answers, references, strict=True)), timeout_s))
    return [v is Verdict.MATCH for v in verdicts]


def grade_draws(
    draws: Sequence[Sequence[str]],
    references: Sequence[str],
    *,
    extraction: AnswerExtraction,
    stops: Sequence[str] = (),
) -> list[list[bool]]:
    """k draws per problem (`draws[i]` answers the problem of `references[i]`), graded in
    one batch; the verdicts keep the draws' shape."""
    k = len(draws[0]) if draws else 0
    flat = grade_now(
        [text for texts in draws for text in texts],
        [ref for ref in references for _ in range(k)],
        extraction=extraction,
        stops=stops,
    )
    return [flat[i : i + k] for i in range(0, len(flat), k)]
