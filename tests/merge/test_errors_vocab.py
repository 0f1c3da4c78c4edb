"""Bad input gets a named error and nothing is written; added vocabulary; I/O."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mmgrid.errors import UnknownNameError
from mmgrid.merge import merge, merge_to_file
from mmgrid.merge.errors import MergeParamError, MissingTensorError, NonFiniteError, ShapeMismatchError


def test_unknown_method_and_params(models):
    with pytest.raises(UnknownNameError, match="tie"):
        merge("tie", [models["a"]], base=models["base"])
    with pytest.raises(MergeParamError, match="densty"):
        merge("ties", [models["a"]], base=models["base"], densty=0.2)
    with pytest.raises(MergeParamError, match="density"):
        merge("ties", [models["a"]], base=models["base"], density=0.0)
    with pytest.raises(MergeParamError, match="p="):
        merge("dare", [models["a"]], base=models["base"], p=1.0)
    with pytest.raises(MergeParamError, match="base"):
        merge("ties", [models["a"]])
    with pytest.raises(MergeParamError, match="exactly 2"):
        merge("temporal", [models["a"]])


def test_shape_missing_nan(models, tmp_path: Path):
    bad = dict(models["a"])
    bad["layers.0.q.weight"] = torch.zeros(4, 5)
    with pytest.raises(ShapeMismatchError, match="layers.0.q.weight"):
        merge("average", [models["a"], bad])
    miss = {k: v for k, v in models["a"].items() if k != "layers.0.q.weight"}
    with pytest.raises(MissingTensorError):
        merge("average", [models["a"], miss])
    nan = dict(models["a"])
    nan["layers.0.norm.weight"] = torch.tensor([float("nan")] * 4)
    out = tmp_path / "m.safetensors"
    with pytest.raises(NonFiniteError, match="layers.0.norm.weight"):
        merge_to_file("average", [models["a"], nan], out)
    assert not out.exists() and not list(tmp_path.iterdir())  # nothing written
    ints = dict(models["a"])
    ints["codes"] = torch.arange(5) + 1
    with pytest.raises(ShapeMismatchError, match="codes"):
        merge("average", [models["a"], ints])
    huge = {"w": torch.full((2,), 3e38)}
    with pytest.raises(NonFiniteError):
        merge("task_arithmetic", [huge, huge], base={"w": torch.zeros(2)})


def test_streamed_file_equals_in_memory(models, tmp_path: Path):
    paths = {}
    for k, v in models.items():
        paths[k] = tmp_path / f"{k}.safetensors"
        save_file({n: t.to(torch.bfloat16) if t.is_floating_point() else t for n, t in v.items()}, str(paths[k]))
    out = tmp_path / "out.safetensors"
    merge_to_file("ties", [paths["a"], paths["b"]], out, base=paths["base"], density=0.3)
    mem = merge("ties", [load_file(str(paths["a"])), load_file(str(paths["b"]))], base=load_file(str(paths["base"])), density=0.3)
    disk = load_file(str(out))
    assert list(disk) == list(mem)
    for k in mem:
        assert disk[k].dtype == mem[k].dtype and torch.equal(disk[k], mem[k])


def _with_rows(state: dict, tokens: list[str], seed: int) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    st = dict(state)
    st["embed_tokens.weight"] = torch.cat([state["embed_tokens.weight"], torch.randn(len(tokens), 4, generator=g)])
    return st, {"added_rows": {"embed_tokens.weight": [10, tokens]}}


def test_added_vocabulary_union(models):
    from mmgrid.merge.api import merge_with_info
    from mmgrid.merge.tensors import from_state

    a, ma = _with_rows(models["a"], ["<a_0>", "<s_1>"], 1)
    b, mb = _with_rows(models["b"], ["<b_0>", "<s_1>"], 2)
    out, info = merge_with_info("average", [from_state(a, "A", ma), from_state(b, "B", mb)])
    emb = out["embed_tokens.weight"]
    assert emb.shape == (13, 4)
    assert torch.allclose(emb[:10], (a["embed_tokens.weight"][:10] + b["embed_tokens.weight"][:10]) / 2)
    assert torch.equal(emb[10], a["embed_tokens.weight"][10])  # <a_0> only in A
    assert torch.allclose(emb[11], (a["embed_tokens.weight"][11] + b["embed_tokens.weight"][11]) / 2)  # shared token
    assert torch.equal(emb[12], b["embed_tokens.weight"][10])  # <b_0> only in B
    assert info.added_rows == {"embed_tokens.weight": [10, ["<a_0>", "<s_1>", "<b_0>"]]}
    rows = info.rows["embed_tokens.weight"]["added"]
    assert [r["inputs"] for r in rows] == [[0], [0, 1], [1]]
    # with a base lacking the tokens: shared rows by the method, added rows as above
    out2 = merge("task_arithmetic", [from_state(a, "A", ma), from_state(b, "B", mb)], base=models["base"])
    assert out2["embed_tokens.weight"].shape == (13, 4)


def test_temporal_sweep_and_inplace(models):
    from mmgrid.merge.inplace import apply_inplace
    from mmgrid.merge.interpolation import TemporalSweep

    sw = TemporalSweep(models["a"], models["b"])
    for lam in (-0.5, 0.0, 0.3, 1.0, 1.7):
        expect = merge("temporal", [models["a"], models["b"]], lam=lam)
        got = sw.state_at(lam)
        assert all(torch.equal(got[k], expect[k]) for k in expect)  # one definition of a point
    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.zeros(4, 4))
    sw2 = TemporalSweep({"w": torch.zeros(4, 4)}, {"w": torch.ones(4, 4)})
    sw2.apply_to(module, 0.25)
    assert torch.allclose(module.w.data, torch.full((4, 4), 0.25))
    apply_inplace(module, {"w": torch.full((4, 4), 2.0)})
    assert torch.allclose(module.w.data, torch.full((4, 4), 2.0))


@pytest.mark.parametrize("fast", [True, False])
def test_temporal_added_rows_merge_equals_sweep(models, fast):
    """Added-vocabulary rows: a token both checkpoints have is interpolated like the
    shared rows (ops.interpolate), a token of one checkpoint is kept; the merge and the
    sweep give the same bits on every path."""
    from mmgrid.merge import ops
    from mmgrid.merge.executor import REFERENCE, Route
    from mmgrid.merge.interpolation import TemporalSweep
    from mmgrid.merge.tensors import from_state

    route = Route() if fast else REFERENCE
    a, ma = _with_rows(models["a"], ["<a_0>", "<s_1>"], 1)
    b, mb = _with_rows(models["b"], ["<b_0>", "<s_1>"], 2)
    ea, eb = a["embed_tokens.weight"], b["embed_tokens.weight"]
    sw = TemporalSweep(from_state(a, "A", ma), from_state(b, "B", mb))
    for lam in (-0.3, 0.6, 1.4):
        out = merge("temporal", [from_state(a, "A", ma), from_state(b, "B", mb)], lam=lam, route=route)
        emb = out["embed_tokens.weight"]
        assert emb.shape == (13, 4)
        assert torch.equal(emb[:10], ops.interpolate(ea[:10], eb[:10], lam))
        assert torch.equal(emb[10], ea[10]) and torch.equal(emb[12], eb[10])  # kept as they are
        assert torch.equal(emb[11], ops.interpolate(ea[11], eb[11], lam))  # <s_1> in both
        # and by hand for one entry of the shared token (Eq. 10 in float64, float32 rounding)
        x, y = float(ea[11, 2]), float(eb[11, 2])
        assert abs(float(emb[11, 2]) - (x + lam * (y - x))) <= 1e-6 * (abs(x) + abs(y) + 1)
        got = sw.state_at(lam)
        assert all(torch.equal(got[k], out[k]) for k in out)


def test_neutral_base_is_average(models):
    out = merge("task_arithmetic", [models["a"], models["b"]], base=[models["a"], models["b"]], weights=[0.5, 0.5])
    avg = merge("average", [models["a"], models["b"]])
    assert all(torch.allclose(out[k].float(), avg[k].float(), atol=1e-6) for k in out)


@pytest.mark.parametrize("method,params", [("task_arithmetic", {}), ("ties", {"density": 0.3}), ("average", {}),
                                           ("temporal", {"lam": 1.4}), ("ties", {"density": 0.3, "combine": "sum"})])
def test_row_chunks_give_the_same_result(models, monkeypatch, method, params):
    from mmgrid.merge import plan

    ins = [models["a"], models["b"]]
    whole = merge(method, ins, base=models["base"], **params)
    monkeypatch.setattr(plan, "CHUNK_ELEMS", 13)  # several chunks per tensor
    chunked = merge(method, ins, base=models["base"], **params)
    assert all(torch.equal(whole[k], chunked[k]) for k in whole)


def test_streamed_file_keeps_added_rows_meta(models, tmp_path: Path):
    from mmgrid.merge.tensors import from_safetensors, from_state

    a, ma = _with_rows(models["a"], ["<a_0>"], 1)
    b, mb = _with_rows(models["b"], ["<b_0>"], 2)
    out = tmp_path / "m.safetensors"
    info = merge_to_file("average", [from_state(a, "A", ma), from_state(b, "B", mb)], out)
    back = from_safetensors(out)
    assert back.meta["added_rows"] == info.added_rows == {"embed_tokens.weight": [10, ["<a_0>", "<b_0>"]]}
    assert back.shapes["embed_tokens.weight"][0] == (12, 4)


@pytest.mark.parametrize("method", ["average", "task_arithmetic", "ties", "dare", "ties_dare", "orthomerge", "gcwm"])
def test_inputs_are_never_modified(models, method):
    before = {k: {n: t.clone() for n, t in m.items()} for k, m in models.items()}
    merge(method, [models["a"], models["b"]], base=models["base"])
    for k, m in models.items():
        assert all(torch.equal(m[n], before[k][n]) for n in m)


def test_unreadable_source(tmp_path: Path):
    from mmgrid.merge.errors import SourceError

    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    with pytest.raises(SourceError, match="not a readable"):
        merge("average", [bad, bad])
    with pytest.raises(SourceError, match="registry"):
        merge("average", ["0123abcd"])
