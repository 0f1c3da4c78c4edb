"""The shared offline embedder: loads without the hub, normalises, caches in memory and on disk."""

from __future__ import annotations

import numpy as np
import pytest

from mmgrid.errors import ModelError
from mmgrid.paradigms import embedder as E


def test_default_embedder_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    vecs = E.encode(["red cotton shirt", "a red shirt made of cotton", "steel kettle for tea"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > sims[0, 2]  # paraphrases are closer than unrelated items


def test_unknown_embedder_path_is_a_model_error(tmp_path) -> None:
    with pytest.raises(ModelError, match="never downloads"):
        E.resolve_embedder_path("sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(ModelError, match="local folder"):
        E.load_embedder(str(tmp_path / "missing"))


def test_embed_items_caches_in_memory_and_on_disk(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["blue steel kettle", "green paper notebook"]
    first = E.embed_items(texts, cache_dir=tmp_path)
    assert E.embed_items(texts, cache_dir=tmp_path) is first  # same object: memory hit
    files = list(tmp_path.glob("*.safetensors"))
    assert [f.stem for f in files] == [E.texts_key(texts, None)]
    E.clear_caches()

    def boom(*_a, **_k):  # a disk hit must not re-encode
        raise AssertionError("encoded again")

    monkeypatch.setattr(E, "encode", boom)
    again = E.embed_items(texts, cache_dir=tmp_path)
    np.testing.assert_array_equal(again, first)
    assert not again.flags.writeable


def test_cache_key_depends_on_texts_and_order() -> None:
    a = E.texts_key(["x", "y"], None)
    assert a == E.texts_key(["x", "y"], None)
    assert a != E.texts_key(["y", "x"], None)
    assert a != E.texts_key(["xy"], None)
