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


__all__ = ["EmptySelection", "InputError", "OutputLocationError"]
