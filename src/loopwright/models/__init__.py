"""Model backends: the embedded local model, OpenAI-compatible servers, and record/replay.

Each is a `loopwright.policy.Model`: `complete(ModelRequest) -> Completion`.
llama-cpp-python is imported only when a LlamaCpp model first loads.
"""

from loopwright.errors import ModelChecksumError
from loopwright.models.fallback import Fallback
from loopwright.models.grammar import grammar_for, plan_grammar, react_grammar
from loopwright.models.hub import parse_hub_ref
from loopwright.models.llamacpp import LlamaCpp, default_model_path, default_n_ctx
from loopwright.models.openai_compat import OpenAICompatible
from loopwright.models.record import Recorder, Replay, read_cassette

__all__ = [
    "Fallback",
    "LlamaCpp",
    "ModelChecksumError",
    "OpenAICompatible",
    "Recorder",
    "Replay",
    "default_model_path",
    "default_n_ctx",
    "grammar_for",
    "parse_hub_ref",
    "plan_grammar",
    "react_grammar",
    "read_cassette",
]
