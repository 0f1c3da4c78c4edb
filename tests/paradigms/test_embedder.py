"""The shared offline embedder: loads without the hub, normalises, caches in memory and on disk."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmgrid.errors import ModelError
from mmgrid.paradigms import embedder as E
from mmgrid.paradigms.errors import UnsafeEmbedderError


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
    with pytest.raises(ModelError, match="is no folder .* does not exist"):
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


def _st_folder(root, modules, files) -> str:
    """A sentence-transformers-shaped folder: modules.json and the given files (bytes, never unpickled)."""
    root.mkdir()
    (root / "modules.json").write_text(json.dumps(modules))
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return str(root)


PICKLE_BYTES = b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."  # a pickle's shape; only its name is looked at
TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
DENSE = {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.mark.parametrize(
    "case, modules, files, what",
    [
        ("bin only", [TRANSFORMER], {"config.json": b"{}", "pytorch_model.bin": PICKLE_BYTES}, "pytorch_model.bin"),
        ("pt only", [TRANSFORMER], {"config.json": b"{}", "weights.pt": PICKLE_BYTES}, "weights.pt"),
        ("dense module bin only", [TRANSFORMER, DENSE],
         {"config.json": b"{}", "model.safetensors": b"x", "1_Dense/pytorch_model.bin": PICKLE_BYTES},
         "1_Dense/pytorch_model.bin"),
        ("module path outside", [dict(TRANSFORMER, path="../elsewhere")], {"config.json": b"{}"}, "outside"),
    ],
)
def test_pickle_weights_are_refused_before_loading(tmp_path, monkeypatch, case, modules, files, what) -> None:
    import torch

    def no_unpickling(*_a, **_k):
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", no_unpickling)
    folder = _st_folder(tmp_path / "emb", modules, files)
    with pytest.raises(UnsafeEmbedderError, match="safetensors only") as ei:
        E.load_embedder(folder)
    assert isinstance(ei.value, ModelError) and what in str(ei.value) and str(tmp_path / "emb") in str(ei.value)
    assert "save(out, safe_serialization=True)" in str(ei.value)  # how to fix


def test_a_pickle_beside_safetensors_is_not_refused(tmp_path) -> None:
    folder = _st_folder(tmp_path / "emb", [TRANSFORMER],
                        {"model.safetensors": b"x", "pytorch_model.bin": PICKLE_BYTES})  # fmt: skip
    E.check_weights_safe(Path(folder))  # transformers is told use_safetensors=True: the .bin is never read


def test_packaged_minilm_ships_safetensors_only() -> None:
    path = Path(E.resolve_embedder_path(None))
    E.check_weights_safe(path)
    suffixes = {p.suffix for p in path.rglob("*") if p.is_file()}
    assert ".safetensors" in suffixes and not suffixes & {".bin", ".pt", ".pth", ".pkl", ".ckpt"}


TEXTS = ["red cotton shirt", "a red shirt made of cotton, machine washable, with two pockets", "kettle",
         "steel kettle for tea", "", "Ünïcödé títle — with dashes"]


def test_lean_encoder_equals_sentence_transformers_on_the_default_model() -> None:
    from sentence_transformers import SentenceTransformer

    path = E.resolve_embedder_path(None)
    lean = E.MeanPoolEncoder.load(Path(path), "cpu")
    assert lean is not None  # the default is Transformer -> mean Pooling -> Normalize
    assert E.load_embedder(None).__class__ is E.MeanPoolEncoder  # and load_embedder uses it
    ref = SentenceTransformer(path, device="cpu", local_files_only=True, model_kwargs={"use_safetensors": True})
    want = ref.encode(TEXTS, batch_size=4, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    got = lean.encode(TEXTS, batch_size=4, normalize_embeddings=True)
    assert got.shape == (len(TEXTS), 384) and lean.get_sentence_embedding_dimension() == 384
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6)
    # one text alone (no padding) and in a batch give the same vector
    np.testing.assert_allclose(lean.encode([TEXTS[1]], normalize_embeddings=True)[0], got[1], rtol=1e-4, atol=2e-6)


@pytest.mark.parametrize("change", ["cls pooling", "dense module", "lower case"])
def test_lean_encoder_declines_other_pipelines(tmp_path, change: str) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    pool = {"word_embedding_dimension": 8, "pooling_mode_cls_token": change == "cls pooling",
            "pooling_mode_mean_tokens": change != "cls pooling"}
    st_cfg = {"max_seq_length": 16, "do_lower_case": change == "lower case"}
    if change == "dense module":
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps(st_cfg))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    assert E.MeanPoolEncoder.load(tmp_path, "cpu") is None  # decided from the JSON files: nothing loaded
