"""The fast pass (mmgrid.merge.stream) equals the reference path bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mmgrid.merge import engine, merge, merge_to_file, stream
from mmgrid.merge.errors import NonFiniteError, SourceError
from mmgrid.merge.sweep import TemporalSweep
from mmgrid.merge.tensors import SafetensorsWriter

SHAPES = {"embed_tokens.weight": (37, 8), "layers.0.q.weight": (8, 8), "layers.0.norm.weight": (8,),
          "layers.0.up.weight": (12, 8)}


def _state(seed: int, base: dict | None = None, dtype: torch.dtype = torch.bfloat16) -> dict:
    g = torch.Generator().manual_seed(seed)
    if base is None:
        return {k: (torch.randn(s, generator=g) * 0.02).to(dtype) for k, s in SHAPES.items()}
    out = {}
    for k, v in base.items():
        d = torch.randn(v.shape, generator=g) * 0.002
        d[torch.rand(v.shape, generator=g) < 0.1] = 0.0  # exact zeros: ties at the sign election
        out[k] = (v.float() + d).to(dtype)
    return out


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float32])
def trio(request) -> dict:
    base = _state(0, dtype=request.param)
    return {"base": base, "a": _state(1, base, request.param), "b": _state(2, base, request.param),
            "c": _state(3, base, request.param)}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def _same(x: dict, y: dict) -> bool:
    return x.keys() == y.keys() and all(torch.equal(_bits(x[k]), _bits(y[k])) for k in x)


CASES = [
    ("task_arithmetic", 2, {}),
    ("task_arithmetic", 3, {"lambdas": [0.7, 0.0, -0.4], "scale": 1.3}),
    ("average", 3, {}),
    ("temporal", 2, {"lam": 1.4}),
    ("temporal", 2, {"lam": 0.0}),
    ("ties", 2, {"density": 0.2}),
    ("ties", 3, {"density": 0.35, "lambdas": [1.0, 0.5, 2.0]}),
    ("ties", 2, {"density": 0.3, "lambdas": [1.0, -0.5]}),
    ("ties", 2, {"density": 0.3, "alpha": 0.6}),
    ("ties", 2, {"density": 0.3, "combine": "sum", "scale": 0.8}),
    ("ties", 2, {"density": 1.0}),
]


@pytest.mark.parametrize("method,n,params", CASES)
@pytest.mark.parametrize("chunk", [5, 1 << 18])
def test_fast_pass_equals_reference(trio, monkeypatch, method, n, params, chunk):
    ins = [trio[k] for k in "abc"[:n]]
    base = trio["base"] if method not in ("average", "temporal") else None
    monkeypatch.setattr(engine, "FAST", False)
    ref = merge(method, ins, base=base, **params)
    monkeypatch.setattr(engine, "FAST", True)
    monkeypatch.setattr(stream, "CHUNK", chunk)
    monkeypatch.setattr(engine, "PREPARE_CHUNK", chunk)
    assert _same(ref, merge(method, ins, base=base, **params))


@pytest.mark.parametrize("chunk", [3, 64])
def test_fast_pass_equals_reference_sampled_threshold(trio, monkeypatch, chunk):
    from mmgrid.merge import pipeline as pl

    monkeypatch.setattr(pl, "SAMPLE_TARGET", 50)  # a strided sample counted across tensors and chunks
    ins, params = [trio["a"], trio["b"]], {"density": 0.25}
    monkeypatch.setattr(engine, "FAST", False)
    ref = merge("ties", ins, base=trio["base"], **params)
    monkeypatch.setattr(engine, "FAST", True)
    monkeypatch.setattr(stream, "CHUNK", chunk)
    monkeypatch.setattr(engine, "PREPARE_CHUNK", chunk + 2)
    assert _same(ref, merge("ties", ins, base=trio["base"], **params))


@pytest.mark.parametrize("method,n,params", [CASES[0], CASES[5], CASES[9]])
def test_fast_streamed_file_equals_reference(trio, tmp_path: Path, monkeypatch, method, n, params):
    paths = {}
    for k, v in trio.items():
        paths[k] = tmp_path / f"{k}.safetensors"
        save_file(v, str(paths[k]))
    ins = [paths[k] for k in "abc"[:n]]
    monkeypatch.setattr(engine, "FAST", False)
    ref = merge(method, [trio[k] for k in "abc"[:n]], base=trio["base"], **params)
    monkeypatch.setattr(engine, "FAST", True)
    monkeypatch.setattr(stream, "CHUNK", 7)  # chunks straddle rows and tensors
    out = tmp_path / "out.safetensors"
    merge_to_file(method, ins, out, base=paths["base"], durable=False, **params)
    with safe_open(str(out), "pt") as fh:
        got = {k: fh.get_tensor(k) for k in fh.keys()}
    assert _same(ref, got)


def test_trim_by_hardshrink_equals_masked_fill():
    x = torch.cat([torch.randn(4096) * 0.003, torch.tensor([0.0, -0.0, 0.0025, -0.0025, float("nan"), float("inf")])])
    for thr in (0.0025, float(torch.tensor(1e-3)), 1e-30, 0.0):
        ref = x.clone().masked_fill_(x.abs() < thr, 0.0)
        lam = stream.shrink_lambda(thr)
        got = x.clone() if lam is None else torch.hardshrink(x, lam)
        assert torch.equal(_bits(ref), _bits(got))


def test_fast_pass_names_nan_input(trio, monkeypatch):
    bad = dict(trio["b"])
    bad["layers.0.up.weight"] = bad["layers.0.up.weight"].clone()
    bad["layers.0.up.weight"][3, 2] = float("nan")
    monkeypatch.setattr(stream, "CHUNK", 5)
    for method, params in (("task_arithmetic", {}), ("task_arithmetic", {"lambdas": [1.0, 0.0]}), ("ties", {"density": 1.0})):
        with pytest.raises(NonFiniteError, match="layers.0.up.weight"):
            merge(method, [trio["a"], bad], base=trio["base"], **params)


def test_writer_parts_read_back_bitwise(tmp_path: Path):
    ts = {"x": torch.randn(3, 5).to(torch.bfloat16), "y": torch.randn(4), "z": torch.arange(6, dtype=torch.int64)}
    w = SafetensorsWriter(tmp_path / "o.safetensors", [(k, tuple(v.shape), v.dtype) for k, v in ts.items()])
    flat = ts["x"].reshape(-1)
    w.write_part("x", flat[:4])
    with pytest.raises(SourceError):
        w.write("x", ts["x"])  # a tensor half written by parts cannot be restarted
    w.write_part("x", flat[4:])
    w.write_part("y", ts["y"])
    with pytest.raises(SourceError):
        w.write_part("z", ts["z"].float())  # wrong dtype
    w.write("z", ts["z"])
    w.close()
    with safe_open(str(tmp_path / "o.safetensors"), "pt") as fh:
        assert all(torch.equal(fh.get_tensor(k), v) for k, v in ts.items())


def test_sweep_write_equals_state_at(trio, tmp_path: Path, monkeypatch):
    sw = TemporalSweep(trio["a"], trio["b"])
    monkeypatch.setattr(stream, "CHUNK", 6)
    for lam in (-0.5, 0.3, 1.5):
        sw.write(lam, tmp_path / "p.safetensors", durable=False)
        with safe_open(str(tmp_path / "p.safetensors"), "pt") as fh:
            got = {k: fh.get_tensor(k) for k in fh.keys()}
        assert _same(sw.state_at(lam), got)
        ref = merge("temporal", [trio["a"], trio["b"]], lam=lam)  # (1-lam) t1 + lam t2: rounds differently
        assert all(torch.allclose(ref[k].float(), got[k].float(), rtol=2 ** -7, atol=1e-6) for k in ref)
