"""Models from the Hugging Face hub, with no network: a small GGUF (the bundled SmolLM2-135M)
staged in a temporary hub cache in the hub's own layout and loaded offline through
`LlamaCpp.from_pretrained` and `--model hf:...`; the sha256 check; the one-line error when
a file is neither cached nor fetchable; and the context size read from the file."""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.interfaces import cli
from loopwright.interfaces.common import make_model
from loopwright.models.gguf import trained_context
from loopwright.models.hub import parse_hub_ref, repo_folder
from loopwright.models.llamacpp import N_CTX_CAP, default_n_ctx, default_threads

REPO = "loopwright-test/smollm2-135m"
FILE = "smollm2-135m-instruct-q4_1.gguf"  # not the bundled file's name: a load from the hub shows it
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@functools.cache
def _default_sha256() -> str:
    digest = hashlib.sha256()
    with lw.models.default_model_path().open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def stage(cache: Path, repo: str = REPO, filename: str = FILE) -> Path:
    """The bundled model placed in `cache` as the hub's client leaves a download:
    models--OWNER--NAME/blobs/<sha256>, snapshots/<commit>/<filename> linking to the blob,
    refs/main holding the commit. Returns the snapshot path."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    blob = folder / "blobs" / _default_sha256()
    blob.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():
        try:
            os.link(lw.models.default_model_path(), blob)
        except OSError:  # another file system
            shutil.copyfile(lw.models.default_model_path(), blob)
    snapshot = folder / "snapshots" / COMMIT / filename
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache in use, offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_from_pretrained_takes_the_staged_file_from_the_hub_cache_offline(hub_cache: Path) -> None:
    snapshot = stage(hub_cache)
    model = lw.models.LlamaCpp.from_pretrained(REPO, FILE, max_tokens=8)
    assert model.model_path == snapshot and model.name == FILE
    assert model.max_tokens == 8  # LlamaCpp's options pass through


@pytest.mark.slow
def test_a_model_from_the_hub_cache_completes_a_prompt(hub_cache: Path) -> None:
    stage(hub_cache)
    model = lw.models.LlamaCpp.from_pretrained(REPO, FILE, n_ctx=256, n_threads=1)  # a busy machine: fewer spin
    out = model.complete(lw.ModelRequest("The capital of France is", ("\n",), "summarize", max_tokens=8))
    assert out.text.strip() and out.meta["model"] == FILE
    assert out.usage.prompt_tokens == len(model.tokenize("The capital of France is"))


def test_the_right_sha256_is_accepted(hub_cache: Path) -> None:
    stage(hub_cache)
    model = lw.models.LlamaCpp.from_pretrained(REPO, FILE, _default_sha256().upper())
    assert model.name == FILE


def test_a_wrong_sha256_is_refused_with_a_typed_error_before_loading(
    hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = stage(hub_cache)
    made: list[object] = []
    monkeypatch.setattr(lw.models.LlamaCpp, "__init__", lambda self, *a, **k: made.append(a))
    wrong = "0" * 64
    with pytest.raises(lw.models.ModelChecksumError) as caught:
        lw.models.LlamaCpp.from_pretrained(REPO, FILE, sha256=wrong)
    error = caught.value
    assert isinstance(error, lw.ModelError)
    assert (error.expected, error.actual, Path(str(error.path))) == (wrong, _default_sha256(), snapshot)
    assert wrong in str(error) and _default_sha256() in str(error) and "refusing to load" in str(error)
    assert made == []  # no model was made from the file


def test_a_malformed_sha256_is_a_value_error(hub_cache: Path) -> None:
    stage(hub_cache)
    with pytest.raises(ValueError, match="64 hexadecimal digits"):
        lw.models.LlamaCpp.from_pretrained(REPO, FILE, sha256="abc")


def test_offline_with_nothing_cached_says_so_in_one_line_naming_the_folder_to_fill(hub_cache: Path) -> None:
    with pytest.raises(lw.ModelNotFoundError) as caught:
        lw.models.LlamaCpp.from_pretrained(REPO, FILE)
    message = str(caught.value)
    assert "\n" not in message
    assert str(hub_cache / "models--loopwright-test--smollm2-135m") in message
    assert f"{REPO}/{FILE}" in message and "HF_HUB_OFFLINE" in message


@pytest.fixture
def unreachable_hub(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Online (HF_HUB_OFFLINE unset), but every download that would ask the hub fails as the
    client fails with no network (after its retries: LocalEntryNotFoundError); returns the
    files it was asked for."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    real = huggingface_hub.hf_hub_download
    asked: list[str] = []

    def download(repo_id: str, filename: str, **options: object) -> str:
        if not options.get("local_files_only"):
            asked.append(filename)
            raise LocalEntryNotFoundError("cannot reach the hub and the file is not in the local cache")
        return str(real(repo_id, filename, **options))  # type: ignore[arg-type]

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return asked


def test_a_cached_file_is_used_without_asking_the_hub(hub_cache: Path, unreachable_hub: list[str]) -> None:
    snapshot = stage(hub_cache)
    assert lw.models.LlamaCpp.from_pretrained(REPO, FILE).model_path == snapshot
    assert unreachable_hub == []


def test_an_unreachable_hub_with_nothing_cached_says_so_in_one_line(
    hub_cache: Path, unreachable_hub: list[str]
) -> None:
    with pytest.raises(lw.ModelNotFoundError) as caught:
        lw.models.LlamaCpp.from_pretrained(REPO, FILE)
    message = str(caught.value)
    assert unreachable_hub == [FILE] and "\n" not in message
    assert "could not be reached" in message and str(repo_folder(REPO)) in message


def test_a_file_the_cached_repo_lacks_is_not_found_either(hub_cache: Path) -> None:
    stage(hub_cache)
    with pytest.raises(lw.ModelNotFoundError, match="other.gguf is not in the Hugging Face hub cache"):
        lw.models.LlamaCpp.from_pretrained(REPO, "other.gguf")


def test_a_glob_matching_one_cached_file_picks_it(hub_cache: Path) -> None:
    snapshot = stage(hub_cache)
    assert lw.models.LlamaCpp.from_pretrained(REPO, "*q4_1.gguf").model_path == snapshot


def test_a_glob_matching_several_files_is_refused(hub_cache: Path) -> None:
    stage(hub_cache)
    stage(hub_cache, filename="smollm2-copy-q4_1.gguf")
    with pytest.raises(lw.ModelNotFoundError, match="must match exactly one file"):
        lw.models.LlamaCpp.from_pretrained(REPO, "*.gguf")


def test_hub_references_name_owner_repo_and_file() -> None:
    assert parse_hub_ref("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/q4.gguf") == ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q4.gguf")
    assert parse_hub_ref("hf:o/n/sub/dir/f.gguf") == ("o/n", "sub/dir/f.gguf")
    for bad in ("hf:o/f.gguf", "hf:o//f.gguf", "hf:", "hf:o/n/"):
        with pytest.raises(ValueError, match="hf:OWNER/NAME/FILE.gguf"):
            parse_hub_ref(bad)


def test_the_repo_folder_follows_the_hub_cache_layout(hub_cache: Path) -> None:
    assert repo_folder("a/b") == hub_cache / "models--a--b"
    assert repo_folder("a/b", "/elsewhere") == Path("/elsewhere/models--a--b")


# ------------------------------------------------------------------ the command line


def test_cli_model_hf_resolves_through_the_hub_cache(hub_cache: Path) -> None:
    snapshot = stage(hub_cache)
    model = make_model(argparse.Namespace(model=f"hf:{REPO}/{FILE}", n_ctx=None))
    assert isinstance(model, lw.models.LlamaCpp)
    assert model.model_path == snapshot and model.n_ctx == default_n_ctx(snapshot)


def test_loopwright_run_with_a_hub_model_loads_and_calls_that_file(
    hub_cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the command's entry point: the file is loaded for real (the command loads
    before it runs); the calls are answered by a stand-in that records which file it is
    (a real step costs a minute on a busy 2-core machine; the completion test runs one)."""
    snapshot = stage(hub_cache)
    called: list[Path] = []
    reply = "Thought: I know the answer\nFinal Answer: 391"

    def complete(self: lw.models.LlamaCpp, request: lw.ModelRequest) -> lw.Completion:
        called.append(self.model_path)
        return lw.Completion(reply)

    def stream(self: lw.models.LlamaCpp, request: lw.ModelRequest) -> Iterator[str | lw.Completion]:
        called.append(self.model_path)
        yield reply
        yield lw.Completion("")

    monkeypatch.setattr(lw.models.LlamaCpp, "complete", complete)
    monkeypatch.setattr(lw.models.LlamaCpp, "stream", stream)
    code = cli.main(["run", "What is 17 * 23?", "--model", f"hf:{REPO}/{FILE}", "--json", "--max-steps", "1"])
    trace = lw.Trace.from_json(capsys.readouterr().out)
    assert code == 0 and trace.final_answer == "391"
    assert called == [snapshot]  # the hub file answered, not the bundled default


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (f"hf:{REPO}/absent.gguf", "models--loopwright-test--smollm2-135m"),
        ("hf:justone/file.gguf", "hf:OWNER/NAME/FILE.gguf"),
    ],
)
def test_loopwright_run_with_an_unusable_hub_model_is_a_one_line_usage_error(
    hub_cache: Path, capsys: pytest.CaptureFixture[str], ref: str, expected: str
) -> None:
    code = cli.main(["run", "q", "--model", ref])
    _, err = capsys.readouterr()
    assert code == 2 and expected in err
    assert [line for line in err.splitlines() if ref in line] == [err.strip().splitlines()[-1]]


# ------------------------------------------------------------------ context size from the file


def gguf_header(path: Path, entries: list[tuple[str, int, bytes]]) -> Path:
    """A GGUF v3 file holding only a key-value header: (key, type, encoded value)."""
    def text(s: str) -> bytes:
        return struct.pack("<Q", len(s.encode())) + s.encode()

    body = b"".join(text(key) + struct.pack("<I", kind) + value for key, kind, value in entries)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + body)
    return path


def _str(s: str) -> bytes:
    return struct.pack("<Q", len(s.encode())) + s.encode()


def test_the_trained_context_is_read_past_arrays_and_in_any_key_order(tmp_path: Path) -> None:
    tokens = struct.pack("<IQ", 8, 3) + _str("a") + _str("bb") + _str("<s>")
    scores = struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0.0, 1.0, 2.0)
    path = gguf_header(tmp_path / "m.gguf", [
        ("tokenizer.ggml.tokens", 9, tokens),
        ("tokenizer.ggml.scores", 9, scores),
        ("phi3.context_length", 4, struct.pack("<I", 4096)),
        ("general.architecture", 8, _str("phi3")),
        ("llama.context_length", 4, struct.pack("<I", 999)),
    ])  # fmt: skip
    assert trained_context(path) == 4096
    assert trained_context(gguf_header(tmp_path / "u.gguf", [("general.architecture", 8, _str("x"))])) is None
    (tmp_path / "t.gguf").write_bytes(path.read_bytes()[:40])
    assert trained_context(tmp_path / "t.gguf") is None
    assert trained_context(tmp_path / "absent.gguf") is None


def test_n_ctx_defaults_to_the_trained_context_capped(tmp_path: Path) -> None:
    def model_with(trained: int) -> lw.models.LlamaCpp:
        path = gguf_header(tmp_path / f"c{trained}.gguf", [
            ("general.architecture", 8, _str("llama")),
            ("llama.context_length", 10, struct.pack("<Q", trained)),
        ])  # fmt: skip
        return lw.models.LlamaCpp(path)

    assert model_with(512).n_ctx == 512  # never past what the model was trained with
    assert model_with(N_CTX_CAP * 4).n_ctx == N_CTX_CAP
    assert lw.models.LlamaCpp(tmp_path / "c512.gguf", n_ctx=300).n_ctx == 300  # the caller's wins
    not_gguf = tmp_path / "plain.bin"
    not_gguf.write_bytes(b"\0" * 64)
    assert lw.models.LlamaCpp(not_gguf).n_ctx == N_CTX_CAP


def qwen2_header(path: Path) -> Path:
    """A GGUF header with the metadata of Qwen2.5-Coder-0.5B-Instruct Q4_K_M (its first 15
    keys as the official file writes them, then a short vocabulary in place of its 151,936
    tokens and a template in place of its chat template): no weights."""
    u32 = functools.partial(struct.pack, "<I")
    f32 = functools.partial(struct.pack, "<f")
    tokens = struct.pack("<IQ", 8, 3) + _str("!") + _str("Hello") + _str("<|im_end|>")
    return gguf_header(path, [
        ("general.architecture", 8, _str("qwen2")),
        ("general.type", 8, _str("model")),
        ("general.name", 8, _str("Qwen2.5 Coder 0.5B Instruct AWQ")),
        ("general.finetune", 8, _str("Instruct-AWQ")),
        ("general.basename", 8, _str("Qwen2.5-Coder")),
        ("general.size_label", 8, _str("0.5B")),
        ("qwen2.block_count", 4, u32(24)),
        ("qwen2.context_length", 4, u32(32768)),
        ("qwen2.embedding_length", 4, u32(896)),
        ("qwen2.feed_forward_length", 4, u32(4864)),
        ("qwen2.attention.head_count", 4, u32(14)),
        ("qwen2.attention.head_count_kv", 4, u32(2)),
        ("qwen2.rope.freq_base", 6, f32(1000000.0)),
        ("qwen2.attention.layer_norm_rms_epsilon", 6, f32(1e-06)),
        ("general.file_type", 4, u32(15)),
        ("tokenizer.ggml.model", 8, _str("gpt2")),
        ("tokenizer.ggml.tokens", 9, tokens),
        ("tokenizer.chat_template", 8, _str("{%- for message in messages %}{{ message.content }}{%- endfor %}")),
        ("general.quantization_version", 4, u32(2)),
    ])  # fmt: skip


@pytest.mark.parametrize("which", ["llama", "qwen2"])
def test_a_llama_and_a_qwen2_gguf_get_sensible_defaults(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled SmolLM2 (architecture llama, 8,192 tokens trained) and a header with
    Qwen2.5-Coder-0.5B's own metadata (qwen2, 32,768): the context is the trained one
    capped, the threads every core."""
    path = lw.models.default_model_path() if which == "llama" else qwen2_header(tmp_path / "qwen2.gguf")
    monkeypatch.delenv("LOOPWRIGHT_N_THREADS", raising=False)
    trained = trained_context(path)
    assert trained == {"llama": 8192, "qwen2": 32768}[which]
    model = lw.models.LlamaCpp(path)
    assert model.n_ctx == N_CTX_CAP and model.n_threads == default_threads()


@pytest.mark.slow
def test_a_llama_gguf_completes_the_raw_prompt_without_a_chat_template() -> None:
    """The prompt is sent as its own tokens, nothing wrapped around it (no chat template,
    no special tokens), and the model continues it. (The same check on the real
    Qwen2.5-Coder-0.5B file is `benchmarks/fetch_qwen_coder.py --check`.)"""
    model = lw.models.LlamaCpp(lw.models.default_model_path(), n_ctx=256, n_threads=1, grammar=False)
    prompt = "The capital of France is"
    out = model.complete(lw.ModelRequest(prompt, purpose="summarize", max_tokens=8))
    assert out.usage.prompt_tokens == out.usage.evaluated_tokens == len(model.tokenize(prompt))
    assert "Paris" in out.text and "<|" not in out.text
