"""`StrictConfig`: the base of every config section, whichever layer reads it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictConfig(BaseModel):
    """A config section: a key it does not know is an error (a misspelt knob is refused,
    not silently left at its default), and a parsed config is never changed in place."""

    model_config = ConfigDict(extra="forbid", frozen=True)


__all__ = ["StrictConfig"]
