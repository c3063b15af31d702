"""Memory for long runs and conversations: the three tiers of the seeds.

BufferMemory keeps the last turns verbatim; SummaryMemory folds the turns it evicts
into a rolling summary; SemanticMemory files every turn for recall by cosine
similarity; TieredMemory puts the three together and assembles a context slice that
fits a token budget. Embedders turn text into vectors: HashingEmbedder (no
dependencies) or MiniLMEmbedder (the real all-MiniLM-L6-v2, extra `embeddings`).

BM25Memory recalls by words weighed by their rarity (no model, no torch); HybridMemory
fuses it with dense recall by reciprocal rank and is the default archive
(`default_memory`). SQLiteMemoryStore keeps what a HybridMemory remembers in a file,
by namespace, so it outlives the process; forgetting deletes it from the file.
"""

from loopwright.memory.ann import HNSWIndex, IVFIndex, VectorIndex
from loopwright.memory.buffer import BufferMemory
from loopwright.memory.embedders import Embedder, HashingEmbedder, MiniLMEmbedder
from loopwright.memory.hybrid import HybridMemory, default_memory, reciprocal_rank_fusion
from loopwright.memory.lexical import BM25Memory
from loopwright.memory.semantic import Recalled, SemanticMemory
from loopwright.memory.sqlite import MemoryStore, SQLiteMemoryStore, StoredMemory
from loopwright.memory.summary import SummaryMemory, summarize_memory
from loopwright.memory.tiered import Archive, Memory, TieredMemory, context_within
from loopwright.prompting.templates import SUMMARIZE_PROMPT

__all__ = [
    "SUMMARIZE_PROMPT",
    "Archive",
    "BM25Memory",
    "BufferMemory",
    "Embedder",
    "HNSWIndex",
    "HashingEmbedder",
    "HybridMemory",
    "IVFIndex",
    "Memory",
    "MemoryStore",
    "MiniLMEmbedder",
    "Recalled",
    "SQLiteMemoryStore",
    "SemanticMemory",
    "StoredMemory",
    "SummaryMemory",
    "TieredMemory",
    "VectorIndex",
    "context_within",
    "default_memory",
    "reciprocal_rank_fusion",
    "summarize_memory",
]
