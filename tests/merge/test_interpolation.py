"""The sweeps of mmgrid.merge.interpolation (MMGRid Eq. 7, 10): every point bitwise the
merge it stands for, written, applied in place, or read from files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from fastpass_data import _bits, _same, _state, trio  # noqa: F401  (trio is a fixture)
from mmgrid.merge import merge, merge_to_file, ops
from mmgrid.merge import interpolation as sweep_mod
from mmgrid.merge.errors import NonFiniteError, SourceError
from mmgrid.merge.executor import REFERENCE, Route
from mmgrid.merge.fastpass import kernels, reads
from mmgrid.merge.interpolation import TemporalSweep


@pytest.mark.parametrize("block_bytes", [1 << 22, 40])
def test_sweep_write_equals_state_at(trio, tmp_path: Path, monkeypatch, block_bytes):
    before = {k: v.clone() for k, v in trio["b"].items()}
    sw = TemporalSweep(trio["a"], trio["b"])
    monkeypatch.setattr(kernels, "CHUNK", 6)
    monkeypatch.setattr(sweep_mod, "SWEEP_BLOCK_BYTES", block_bytes)
    for lam in (-0.5, 0.3, 1.5):
        sw.write(lam, tmp_path / "p.safetensors", durable=False)  # the second and third replace the first
        with safe_open(str(tmp_path / "p.safetensors"), "pt") as fh:
            got = {k: fh.get_tensor(k) for k in fh.keys()}
        assert _same(sw.state_at(lam), got)
        assert _same(merge("temporal", [trio["a"], trio["b"]], lam=lam), got)  # a recipe re-run gives the point
        # hand-computed Eq. 10 in float64 for one entry
        k = "layers.0.up.weight"
        a, b = trio["a"][k][2, 3].double(), trio["b"][k][2, 3].double()
        assert abs(float(got[k][2, 3]) - float(a + lam * (b - a))) <= 2 ** -7 * abs(float(a + lam * (b - a))) + 1e-6
    assert not list(tmp_path.glob("*.partial"))
    assert _same(before, trio["b"])  # the sweep holds the inputs; it never changes them


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                                    (torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)])
def test_sweep_point_is_eq10_rounded_once(tmp_path: Path, monkeypatch, dtypes):
    """Every point is t1 + lam (t2 - t1) computed in float32 and rounded once to t1's dtype
    (checked against float64), the same bits from state_at and from the blockwise write,
    with lam = 0 and lam = 1 giving the checkpoints themselves."""
    g = torch.Generator().manual_seed(3)
    t1 = {"w": torch.randn(37, 5, generator=g).to(dtypes[0])}
    t2 = {"w": (t1["w"].float() + 0.1 * torch.randn(37, 5, generator=g)).to(dtypes[1])}
    sw = TemporalSweep(t1, t2)
    monkeypatch.setattr(sweep_mod, "SWEEP_BLOCK_BYTES", 24)  # blocks of a few entries
    for lam in (-0.5, 0.25, 0.5, 1.3, 2.0):
        got = sw.state_at(lam)["w"]
        assert got.dtype == dtypes[0]
        a, b = t1["w"].double(), t2["w"].double()
        exact = a + lam * (b - a)
        u = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11, torch.float32: 2 ** -24}[dtypes[0]]
        # one rounding to the output dtype plus three float32 roundings of the terms
        bound = u * exact.abs() + 3 * 2 ** -24 * (a.abs() + b.abs() + abs(lam) * (b - a).abs())
        assert torch.all((got.double() - exact).abs() <= bound)
        sw.write(lam, tmp_path / "p.safetensors", durable=False)
        with safe_open(str(tmp_path / "p.safetensors"), "pt") as fh:
            assert torch.equal(_bits(fh.get_tensor("w")), _bits(got))
    assert torch.equal(sw.state_at(0.0)["w"], t1["w"])
    assert torch.equal(sw.state_at(1.0)["w"], t2["w"].to(dtypes[0]))


def test_sweep_over_files_maps_them_copy_on_write(trio, tmp_path: Path):
    """A sweep over files holds them memory-mapped: same points as over the state dicts,
    and a write into a mapped tensor changes neither the file nor a second mapping."""
    from mmgrid.merge.tensors import from_safetensors

    paths = {}
    for k in ("a", "b"):
        paths[k] = tmp_path / f"{k}.safetensors"
        save_file(trio[k], str(paths[k]))
    raw = paths["a"].read_bytes()
    on_disk, in_mem = TemporalSweep(paths["a"], paths["b"]), TemporalSweep(trio["a"], trio["b"])
    for lam in (-0.5, 0.7, 1.5):
        assert _same(on_disk.state_at(lam), in_mem.state_at(lam))
    src = from_safetensors(paths["a"])
    k = "layers.0.up.weight"
    t = src.mapped(k)
    assert torch.equal(t, trio["a"][k])
    t.add_(1.0)
    assert paths["a"].read_bytes() == raw
    assert torch.equal(from_safetensors(paths["a"]).mapped(k), trio["a"][k])
    paths["a"].write_bytes(raw[: len(raw) - 8])  # a truncated copy: named, not a crash
    import mmap

    def no_maps(*args, **kwargs):
        raise OSError("no memory maps here")

    with pytest.MonkeyPatch.context() as mp:  # a file system without memory maps: read instead
        mp.setattr(mmap, "mmap", no_maps)
        assert torch.equal(from_safetensors(paths["b"]).mapped(k), trio["b"][k])
    cut = from_safetensors(paths["a"])
    last = max(cut.keys(), key=lambda n: cut.locate(n)[1])  # the tensor at the end of the file
    with pytest.raises(SourceError, match="truncated"):
        cut.mapped(last)


def test_sweep_apply_to_equals_state_at_even_on_its_own_inputs(trio):
    """apply_to lerps into the module (the bits of state_at), also when the module was
    built on theta_t1's own tensors: the sweep copies that pair first, so a later point
    is still computed from the original theta_t1."""
    a = {k: v.clone() for k, v in trio["a"].items()}
    holder = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v, requires_grad=False) for k, v in a.items()})
    module = _Named(holder, a)
    assert all(p.data_ptr() == a[k].data_ptr() for k, p in module.named_parameters())
    sw = TemporalSweep(a, trio["b"])
    ref = TemporalSweep(trio["a"], trio["b"])
    for lam in (1.5, 0.3, -0.5):
        sw.apply_to(module, lam)
        got = dict(module.named_parameters())
        assert _same({k: got[k].detach() for k in a}, ref.state_at(lam))
    assert not _same(a, trio["a"])  # the module's storage (a) moved with it
    assert _same(sw.state_at(0.0), trio["a"])  # the sweep's theta_t1 did not


class _Named(torch.nn.Module):
    """A module whose parameters carry the checkpoint's dotted names and share its storage."""

    def __init__(self, holder: torch.nn.ParameterDict, state: dict) -> None:
        super().__init__()
        self.holder = holder
        self.names = {k: k.replace(".", "_") for k in state}

    def named_parameters(self, *args, **kwargs):
        for k, v in self.names.items():
            yield k, self.holder[v]

    def named_buffers(self, *args, **kwargs):
        return iter(())


@pytest.mark.parametrize("which,value", [("a", float("nan")), ("b", float("-inf"))])
def test_temporal_sweep_names_a_non_finite_input(trio, which, value):
    bad = {k: v.clone() for k, v in trio[which].items()}
    bad["layers.0.q.weight"][1, 1] = value
    ins = {"a": trio["a"], "b": trio["b"], which: bad}
    with pytest.raises(NonFiniteError, match=r"layers\.0\.q\.weight"):
        TemporalSweep(ins["a"], ins["b"])


def _module_for(state: dict) -> torch.nn.Module:
    """A module whose parameters carry ``state``'s names (zeros of the same dtypes)."""
    root = torch.nn.Module()
    for k, v in state.items():
        *path, leaf = k.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_parameter(leaf, torch.nn.Parameter(torch.zeros_like(v), requires_grad=False))
    return root


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                                    (torch.float32, torch.float32), (torch.bfloat16, torch.float32)])
def test_temporal_every_path_gives_the_same_bits(tmp_path: Path, monkeypatch, dtypes):
    """One temporal point, eight ways: merge on the reference path and on the fast pass,
    merge_to_file in blocks (fused lerp) and in chunks, TemporalSweep.state_at, .write and
    .apply_to, and the studies' interpolate_state all give ops.interpolate rounded once
    to t1's dtype. So re-running a stored sweep point's recipe reproduces it bit for bit
    (before, merge computed (1 - lam) t1 + lam t2 and differed in ~1% of bf16 entries)."""
    from mmgrid.sweep.interpolate import interpolate_state

    t1 = _state(5, dtype=dtypes[0])
    t2 = {k: (v.float() + 0.01 * torch.randn(v.shape, generator=torch.Generator().manual_seed(6))).to(dtypes[1])
          for k, v in t1.items()}
    paths = {"t1": tmp_path / "t1.safetensors", "t2": tmp_path / "t2.safetensors"}
    save_file(t1, str(paths["t1"]))
    save_file(t2, str(paths["t2"]))
    sw = TemporalSweep(paths["t1"], paths["t2"])
    monkeypatch.setattr(kernels, "CHUNK", 7)  # the sweep's blocks (merges take route=)
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)
    monkeypatch.setattr(sweep_mod, "SWEEP_BLOCK_BYTES", 40)
    for lam in (-0.5, 0.3, 0.5, 0.7, 1.0, 1.6):
        want = {k: ops.interpolate(t1[k], t2[k], lam).to(dtypes[0]) for k in t1}
        got = {"state_at": sw.state_at(lam), "interpolate_state": interpolate_state(t1, t2, lam)}
        got["reference"] = merge("temporal", [t1, t2], lam=lam, route=REFERENCE)
        got["fast"] = merge("temporal", [t1, t2], lam=lam, route=Route(chunk=7))
        for how, ins in (("file", [paths["t1"], paths["t2"]]), ("memory", [t1, t2])):
            merge_to_file("temporal", ins, tmp_path / "m.safetensors", lam=lam, durable=False, route=Route(chunk=7))
            got[f"merge_to_file({how})"] = load_file(str(tmp_path / "m.safetensors"))
        sw.write(lam, tmp_path / "w.safetensors", durable=False)
        got["write"] = load_file(str(tmp_path / "w.safetensors"))
        module = _module_for(t1)
        sw.apply_to(module, lam)
        got["apply_to"] = {k: p.detach() for k, p in module.named_parameters()}
        for how, st in got.items():
            assert _same(want, {k: st[k] for k in want}), how
    # lam = 1 is theta_t2 itself (rounded to t1's dtype)
    assert _same(sw.state_at(1.0), {k: v.to(dtypes[0]) for k, v in t2.items()})
