"""Every engine's config, as the one `engine:` block a service config takes (by `kind`).

Each config sits in its engine's module, beside the engine it builds; a new engine is one
module and one line here.  Importing this loads no model package (vLLM, torch, xllamacpp):
each engine module imports those only when it builds its engine.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from actors.engines.llamacpp import LlamaCppConfig
from actors.engines.load_model import LoadModelConfig
from actors.engines.load_model_prm import LoadModelPRMConfig
from actors.engines.openai_compat import OpenAIConfig
from actors.engines.openai_pooling import OpenAIPoolingConfig
from actors.engines.transformers_prm import TransformersPRMConfig
from actors.engines.vllm_engine import VLLMConfig
from actors.engines.vllm_pooling import VLLMPoolingConfig

EngineConfig = Annotated[
    LlamaCppConfig
    | VLLMConfig
    | VLLMPoolingConfig
    | OpenAIConfig
    | OpenAIPoolingConfig
    | LoadModelConfig
    | TransformersPRMConfig
    | LoadModelPRMConfig,
    Field(discriminator="kind"),
]

__all__ = [
    "EngineConfig",
    "LlamaCppConfig",
    "LoadModelConfig",
    "LoadModelPRMConfig",
    "OpenAIConfig",
    "OpenAIPoolingConfig",
    "TransformersPRMConfig",
    "VLLMConfig",
    "VLLMPoolingConfig",
]
