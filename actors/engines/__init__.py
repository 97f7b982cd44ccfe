"""Inference engines behind the policy and PRM deployments.

Each engine turns one rendered prompt into one completion and tells how it
ended; the policy and GenPRM layers build on that and on two helpers every
engine offers: rendering a chat with the model's own template and tokenizing.
"""

from actors.engines.base import Completion, Engine, Sampling
from actors.errors import EngineError

__all__ = ["Completion", "Engine", "EngineError", "Sampling"]
