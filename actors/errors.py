"""The error an engine raises when it cannot start or serve, and the config field it is about.

It lives here, below both the configs (`actors.config`) and the engines
(`actors.engines`), because both raise it: a config's model check refuses a checkpoint
folder before anything is built, an engine refuses one it cannot load.  Keeping it out of
`actors.engines` means the configs never import the engines.
"""

from __future__ import annotations


class EngineError(RuntimeError):
    """An engine could not start or serve (missing model file, package, dead server).

    `field` is the config field the error is about, written as the message begins with it
    ("engine.model", "one_pass.step_separator"), or None when it concerns no one field (a
    missing package, a dead server).  A caller that knows which service the engine serves
    prefixes that service to it ("scorer.engine.model: ..."), so it never has to read the
    message to find the field.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        # An engine's error crosses processes (a Serve replica's, pickled to the caller):
        # rebuilt from its message, with its field kept.
        return type(self), (str(self),), {"field": self.field}


__all__ = ["EngineError"]
