"""Memory for long runs and conversations: the three tiers of the seeds.

BufferMemory keeps the last turns verbatim; SummaryMemory folds the turns it evicts
into a rolling summary; SemanticMemory files every turn for recall by cosine
similarity; TieredMemory puts the three together and assembles a context slice that
fits a token budget. Embedders turn text into vectors: HashingEmbedder (no
dependencies) or MiniLMEmbedder (the real all-MiniLM-L6-v2, extra `embeddings`).
"""

from loopwright.memory.ann import HNSWIndex, IVFIndex, VectorIndex
from loopwright.memory.buffer import BufferMemory
from loopwright.memory.embedders import Embedder, HashingEmbedder, MiniLMEmbedder
from loopwright.memory.semantic import Recalled, SemanticMemory
from loopwright.memory.summary import SummaryMemory, summarize_memory
from loopwright.memory.tiered import Memory, TieredMemory, context_within
from loopwright.prompts import SUMMARIZE_PROMPT

__all__ = [
    "SUMMARIZE_PROMPT",
    "BufferMemory",
    "Embedder",
    "HNSWIndex",
    "HashingEmbedder",
    "IVFIndex",
    "Memory",
    "MiniLMEmbedder",
    "Recalled",
    "SemanticMemory",
    "SummaryMemory",
    "TieredMemory",
    "VectorIndex",
    "context_within",
    "summarize_memory",
]
