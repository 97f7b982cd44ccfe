"""How often does the policy model solve a problem source, under each answer extraction?

Samples full solutions (assistant prefix "Step 1:", no step boundary) from the real
llama.cpp engine, in-process (no Ray), with the search's policy prompt (`--prompt paper`,
actors/prompts.py) or the bare problem as the user turn (`--prompt plain`), and grades
every sample against the reference with math-verify under both `answer_extraction` modes:

* ``boxed``: the paper's App. A answer (the last ``\\boxed{}``);
* ``last_number``: the last ``\\boxed{}``, else the number after the first "answer is",
  else the last number of the text.

A sample counts as answered under the search's rule (`search.answers.is_answered`): it
ended naturally (end of sequence) or, for each mode, states its answer in that mode's form.
Prints per-sample rates and the share of problems with at least one correct and at least
one incorrect answered sample (what a DPO pair needs).

    .venv/bin/python -m benchmarks.solve_rate --source arithmetic --problems 20 --samples 4
    .venv/bin/python -m benchmarks.solve_rate --source gsm8k --problems 20 --samples 4
    .venv/bin/python -m benchmarks.solve_rate --max-steps 1 --temperature 0.3
    .venv/bin/python -m benchmarks.solve_rate --model /path/to/other.gguf
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from actors.engines.llamacpp import LlamaCppEngine
from actors.policy import EnginePolicy
from actors.prompts import policy_messages
from common.grading import answers_match
from pipeline.problems.sources import ProblemRow, load_problems, parse_source
from search.answers import AnswerExtraction, extract_answer, is_answered
from search.protocols import FinishReason, Generation, GenerationRequest


def _problems(args: argparse.Namespace) -> list[ProblemRow]:
    if args.source == "arithmetic":
        source = parse_source(
            {
                "kind": "arithmetic",
                "count": args.problems,
                "seed": args.seed,
                "max_steps": args.max_steps,
            }
        )
    else:
        source = parse_source({"kind": "bundled", "dataset": args.source, "limit": args.problems})
    return load_problems(source).problems


def _policy(args: argparse.Namespace, engine: LlamaCppEngine) -> EnginePolicy:
    """The search's policy client, its prompt replaced as `--prompt` or
    `--instruction-file` ask."""
    policy = EnginePolicy(engine)
    if args.prompt == "plain":  # the problem alone as the user turn

        async def render(problem: str, assistant_prefix: str) -> str:
            messages = policy_messages(problem, assistant_prefix)
            messages[0] = {"role": "user", "content": problem}
            return await engine.render_chat(messages, continue_final=True)

        policy.render = render  # type: ignore[method-assign]
    elif args.instruction_file:  # a policy_instruction template with a {problem} field
        instruction = Path(args.instruction_file).read_text(encoding="utf-8")

        async def render_with(problem: str, assistant_prefix: str) -> str:
            messages = policy_messages(problem, assistant_prefix, instruction)
            return await engine.render_chat(messages, continue_final=True)

        policy.render = render_with  # type: ignore[method-assign]
    return policy


class _Tally:
    """Counts over every sample, and per answer extraction mode."""

    def __init__(self) -> None:
        self.modes = list(AnswerExtraction)
        self.samples = self.eos = self.tokens = 0
        self.correct = dict.fromkeys(self.modes, 0)
        self.answered = dict.fromkeys(self.modes, 0)
        self.both = dict.fromkeys(self.modes, 0)
        self.solved = dict.fromkeys(self.modes, 0)

    async def add(self, problem: ProblemRow, generations: Sequence[Generation]) -> None:
        """Grade one problem's samples under every mode."""
        per_mode = {m: [] for m in self.modes}  # type: dict[AnswerExtraction, list[bool]]
        for g in generations:
            self.samples += 1
            self.tokens += g.output_tokens
            natural = g.finish is FinishReason.EOS
            self.eos += natural
            for m in self.modes:
                answer = extract_answer(g.text, m) if is_answered(g.text, g.finish, m) else None
                if answer is None:
                    continue
                ok = await answers_match(answer, str(problem["reference"]))
                self.answered[m] += 1
                self.correct[m] += ok
                per_mode[m].append(ok)
        for m in self.modes:
            self.solved[m] += any(per_mode[m])
            self.both[m] += any(per_mode[m]) and not all(per_mode[m])


def _print_rates(args: argparse.Namespace, tally: _Tally, n: int, wall: float) -> None:
    samples = tally.samples
    print(
        f"source={args.source} prompt={args.instruction_file or args.prompt} T={args.temperature} "
        f"max_steps={args.max_steps} problems={n} samples/problem={args.samples} "
        f"max_tokens={args.max_tokens} first_step={args.first_step} threads={args.threads}: "
        f"{samples} samples, "
        f"{tally.eos / samples:.2f} end naturally, {tally.tokens / wall:.1f} tok/s, {wall:.0f} s"
    )
    for m in tally.modes:
        print(
            f"  {m.value:12s} answer extracted {tally.answered[m] / samples:.2f} of samples | "
            f"correct {tally.correct[m] / samples:.2f} of samples | problems solved by >= 1 "
            f"sample {tally.solved[m] / n:.2f} | problems with a correct and an incorrect answer "
            f"{tally.both[m] / n:.2f}"
        )


async def main(args: argparse.Namespace) -> None:
    problems = _problems(args)
    engine = LlamaCppEngine(args.model, threads=args.threads, parallel=args.parallel)
    policy = _policy(args, engine)
    tally = _Tally()
    start = time.perf_counter()
    for i, p in enumerate(problems):
        request = GenerationRequest(
            problem=p["problem"],
            assistant_prefix="Step 1:",
            n=args.samples,
            max_tokens=args.max_tokens,
            stop=("\nStep",) if args.first_step else (),
            temperature=args.temperature,
            seed=args.seed * 1000 + i,
        )
        generations = await policy.generate(request)
        await tally.add(p, generations)
        if args.show and generations:
            print(f"--- {p['problem']} (reference {p['reference']})\n{generations[0].text}")
    wall = time.perf_counter() - start
    _print_rates(args, tally, len(problems), wall)
    await engine.close()


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("arithmetic", "gsm8k"), default="arithmetic")
    parser.add_argument("--problems", type=int, default=20)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--model", default="embedded", help="'embedded' or a GGUF path")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-steps", type=int, default=2, help="arithmetic: operations")
    parser.add_argument("--prompt", choices=("paper", "plain"), default="paper")
    parser.add_argument(
        "--instruction-file",
        help="with --prompt paper: this policy_instruction template ({problem}) instead",
    )
    parser.add_argument(
        "--first-step",
        action="store_true",
        help='stop at "\\nStep" like the search\'s first node (else: full solutions)',
    )
    parser.add_argument("--show", action="store_true", help="print one sample per problem")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(_parse_args()))
