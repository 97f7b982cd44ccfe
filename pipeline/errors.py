"""The errors that mean "fix the input and run again" (exit status 2 in `jobs/`).

Each message is one line that names the thing to fix: the config field, the
source, the run id or the output location.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad config, source, run id or output location: nothing was searched."""


class EmptySelection(InputError):
    """The source (after filters and slicing) holds no problem at all."""


class OutputLocationError(InputError):
    """The output root cannot be written (missing permission, read-only, full)."""


class OutputFullError(OutputLocationError):
    """The output root ran out of space (ENOSPC) or quota (EDQUOT) during a write.

    `path` is the file being written, `needed_bytes` what the write needed on disk (a
    whole batch when a batch was being committed: `pipeline.store.sink`) and `reason`
    the kernel's answer in words; the run turns them into one line naming the output
    root and the space to free (`pipeline.run.synthesis`).
    """

    def __init__(self, message: str, *, path: str = "", needed_bytes: int = 0, reason: str = ""):
        super().__init__(message)
        self.path = path
        self.needed_bytes = needed_bytes
        self.reason = reason


__all__ = ["EmptySelection", "InputError", "OutputFullError", "OutputLocationError"]
