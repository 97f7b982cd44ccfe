"""What a (re)started run still has to do: the resume rule shared by the run and `--dry-run`."""

from __future__ import annotations

from pipeline.problems.sources import ErrorRow, LoadedProblems, ProblemRow
from pipeline.store.sink import ParquetSink


def pending(loaded: LoadedProblems, sink: ParquetSink) -> tuple[list[ProblemRow], list[ErrorRow]]:
    """What this invocation still has to do: problems to search, source errors to write.

    A problem is done when its tree is committed; a source error (a bad row, or a
    duplicate under its own key) when its error row is.  A failed search's error row
    marks nothing done: the next run searches the problem again.
    """
    searched = sink.searched_problem_ids()
    final_errors = sink.final_error_keys()
    todo = [p for p in loaded.problems if p["problem_id"] not in searched]
    new_errors = [e for e in loaded.errors if e["problem_id"] not in final_errors]
    return todo, new_errors
