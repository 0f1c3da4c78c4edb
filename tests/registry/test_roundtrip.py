"""Bitwise round-trips, identity (same job -> same id, nothing new stored), lazy reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st
from safetensors.torch import save_file

from mmgrid.registry.api import Registry
from .conftest import COORDS, tiny_state


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and p.name != "index.sqlite" and "index.sqlite" not in p.name}


def bits(t: torch.Tensor) -> bytes:
    return t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bitwise_roundtrip(reg: Registry, dtype: torch.dtype) -> None:
    sd = tiny_state(1, dtype)
    fi = torch.finfo(dtype)  # NaN and Inf are refused by put (test_bad_input.py::test_nan_or_inf_refused_before_anything_is_written)
    sd["special"] = torch.tensor([fi.max, fi.min, fi.tiny, -0.0, 1e-40], dtype=dtype)
    cid = reg.put(sd, COORDS, "base")
    out = reg.load(cid)
    assert list(out) == list(sd)
    for name, t in sd.items():
        assert out[name].dtype == t.dtype and out[name].shape == t.shape
        assert bits(out[name]) == bits(t), name


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool]),
    seed=st.integers(0, 2**16),
)
def test_roundtrip_property(tmp_path_factory: pytest.TempPathFactory, shape: list[int], dtype: torch.dtype, seed: int) -> None:
    reg = Registry.open(tmp_path_factory.mktemp("prop"), durable=False)
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(tuple(shape), generator=g) * 100).to(dtype)
    cid = reg.put({"x": t}, COORDS, "base", seed=seed)
    back = reg.load(cid)["x"]
    assert back.dtype == t.dtype and back.shape == t.shape and bits(back) == bits(t)
    reg.close()


def test_same_identity_same_id_nothing_new(reg: Registry) -> None:
    sd = tiny_state(0)
    a = reg.put(sd, COORDS, "base", params={"lr": 1e-3}, seed=0, config_hash="c0")
    before = files_under(reg.root)
    b = reg.put(tiny_state(5), COORDS, "base", params={"lr": 1e-3}, seed=0, config_hash="c0")
    assert a == b and files_under(reg.root) == before
    assert a == Registry.make_id(COORDS, "base", [], {"lr": 1e-3}, "c0", 0)
    assert reg.has(a) and not reg.has("0" * 16)
    # variant defaults to "default": spelling it out is the same identity
    assert Registry.make_id({**COORDS, "variant": "default"}, "base", None, {"lr": 1e-3}, "c0", 0) == a
    assert reg.put(sd, COORDS, "base", seed=1) != a  # seed is identity


def test_load_dtype_casts_only_floats(reg: Registry) -> None:
    cid = reg.put(tiny_state(0), COORDS, "base")
    out = reg.load(cid, dtype=torch.bfloat16)
    assert out["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert out["model.position_ids"].dtype == torch.int64


def test_put_from_safetensors_file_and_sharded_folder(reg: Registry, tmp_path: Path) -> None:
    sd = tiny_state(2)
    save_file(sd, str(tmp_path / "one.safetensors"))
    shard = tmp_path / "sharded"
    shard.mkdir()
    names = list(sd)
    save_file({k: sd[k] for k in names[:3]}, str(shard / "model-00001-of-00002.safetensors"))
    save_file({k: sd[k] for k in names[3:]}, str(shard / "model-00002-of-00002.safetensors"))
    a = reg.put(tmp_path / "one.safetensors", COORDS, "base")
    b = reg.put(shard, {**COORDS, "variant": "sharded"}, "base")
    for cid in (a, b):
        out = reg.load(cid)
        assert set(out) == set(sd) and all(torch.equal(out[k], sd[k]) for k in sd)
    # same tensors: the second put stored no new blob
    assert {r.sha256 for r in reg.get(a).blobs.values()} == {r.sha256 for r in reg.get(b).blobs.values()}


def test_files_meta_and_lazy_tensors(reg: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    sd = tiny_state(3)
    cid = reg.put(sd, COORDS, "trained", files={"config.json": b'{"a": 1}'}, meta={"added_rows": {"w": [16, ["<a>"]]}})
    assert reg.file(cid, "config.json") == b'{"a": 1}'
    m = reg.get(cid)
    assert m.meta["added_rows"]["w"][0] == 16 and m.files and m.code_version.startswith("0.")
    info = reg.tensor_info(cid)
    assert info["model.embed_tokens.weight"] == ((16, 8), torch.float32)
    assert reg.tensor_names(cid) == list(sd)

    reads: list[str] = []
    orig = reg.store.read_tensor
    monkeypatch.setattr(reg.store, "read_tensor", lambda sha, where="", device="cpu": reads.append(where) or orig(sha, where, device))
    lazy = reg.open_tensors(cid)
    assert len(lazy) == len(sd) and not reads  # opening reads nothing
    assert torch.equal(lazy["model.layers.1.mlp.weight"], sd["model.layers.1.mlp.weight"])
    assert len(reads) == 1
    assert torch.equal(lazy.loader("model.position_ids")(), sd["model.position_ids"])
    assert lazy.shape("model.layers.0.mlp.weight") == (8, 8)
