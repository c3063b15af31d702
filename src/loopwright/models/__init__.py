"""Model backends: the embedded local model, OpenAI-compatible servers, and record/replay.

Each is a `loopwright.policy.Model`: `complete(ModelRequest) -> Completion`.
llama-cpp-python is imported only when a LlamaCpp model first loads.
"""

from loopwright.models.grammar import grammar_for, plan_grammar, react_grammar
from loopwright.models.llamacpp import LlamaCpp, default_model_path
from loopwright.models.openai_compat import OpenAICompatible
from loopwright.models.record import Recorder, Replay, read_cassette

__all__ = [
    "LlamaCpp",
    "OpenAICompatible",
    "Recorder",
    "Replay",
    "default_model_path",
    "grammar_for",
    "plan_grammar",
    "react_grammar",
    "read_cassette",
]
