"""The resume rule: what a (re)started run still has to do.

One rule, used by the run's resume filter (`pipeline.run.stream`, in a Ray worker) and by
`--dry-run` (`pipeline.run.plan`): a problem is done when its tree is committed; a source
error (a bad row, or a duplicate under its own key) when its error row is.  A failed
search's error row marks nothing done: the next run searches the problem again.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.problems.sources import ErrorRow, LoadedProblems, ProblemRow
from pipeline.store.run_folder import RunFolder


@dataclass(frozen=True)
class Done:
    """What a run folder has committed, read from its id columns only."""

    searched: frozenset[str]
    final_errors: frozenset[str]

    @classmethod
    def read(cls, folder: RunFolder) -> Done:
        return cls(frozenset(folder.searched_problem_ids()), frozenset(folder.final_error_keys()))

    def skips(self, problem_id: str, *, source_error: bool) -> bool:
        """Is this source record finished (not to be searched or written again)?"""
        return problem_id in (self.final_errors if source_error else self.searched)


def pending(loaded: LoadedProblems, folder: RunFolder) -> tuple[list[ProblemRow], list[ErrorRow]]:
    """What this invocation still has to do: problems to search, source errors to write."""
    done = Done.read(folder)
    todo = [p for p in loaded.problems if not done.skips(p["problem_id"], source_error=False)]
    new_errors = [e for e in loaded.errors if not done.skips(e["problem_id"], source_error=True)]
    return todo, new_errors
