"""The fast pass (mmgrid.merge.fastpass) equals the reference path (mmgrid.merge.reference) bit for bit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mmgrid.merge import executor, merge, merge_to_file, ops
from mmgrid.merge.fastpass import kernels, reads, writer
from mmgrid.merge.errors import NonFiniteError, SourceError
from mmgrid.merge import interpolation as sweep_mod
from mmgrid.merge.interpolation import TemporalSweep
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
    ("task_arithmetic", 3, {"weights": [0.7, 0.0, -0.4], "scale": 1.3}),
    ("average", 3, {}),
    ("temporal", 2, {"lam": 1.4}),
    ("temporal", 2, {"lam": 0.0}),
    ("ties", 2, {"density": 0.2}),
    ("ties", 3, {"density": 0.35, "weights": [1.0, 0.5, 2.0]}),
    ("ties", 2, {"density": 0.3, "weights": [1.0, -0.5]}),
    ("ties", 2, {"density": 0.3, "alpha": 0.6}),
    ("ties", 2, {"density": 0.3, "combine": "sum", "scale": 0.8}),
    ("ties", 2, {"density": 1.0}),
]


@pytest.mark.parametrize("method,n,params", CASES)
@pytest.mark.parametrize("chunk", [5, 1 << 18])
def test_fast_pass_equals_reference(trio, monkeypatch, method, n, params, chunk):
    ins = [trio[k] for k in "abc"[:n]]
    base = trio["base"] if method not in ("average", "temporal") else None
    monkeypatch.setattr(executor, "FAST", False)
    ref = merge(method, ins, base=base, **params)
    monkeypatch.setattr(executor, "FAST", True)
    monkeypatch.setattr(kernels, "CHUNK", chunk)
    monkeypatch.setattr(executor, "PREPARE_CHUNK", chunk)
    assert _same(ref, merge(method, ins, base=base, **params))


@pytest.mark.parametrize("chunk", [3, 64])
def test_fast_pass_equals_reference_sampled_threshold(trio, monkeypatch, chunk):
    from mmgrid.merge import pipeline as pl

    monkeypatch.setattr(pl, "SAMPLE_TARGET", 50)  # a strided sample counted across tensors and chunks
    ins, params = [trio["a"], trio["b"]], {"density": 0.25}
    monkeypatch.setattr(executor, "FAST", False)
    ref = merge("ties", ins, base=trio["base"], **params)
    monkeypatch.setattr(executor, "FAST", True)
    monkeypatch.setattr(kernels, "CHUNK", chunk)
    monkeypatch.setattr(executor, "PREPARE_CHUNK", chunk + 2)
    assert _same(ref, merge("ties", ins, base=trio["base"], **params))


@pytest.mark.parametrize("method,n,params", [CASES[0], CASES[1], CASES[3], CASES[5], CASES[9]])
@pytest.mark.parametrize("block_bytes,threads", [(1 << 22, 2), (40, 2), (40, 1)])
@pytest.mark.parametrize("on_disk", [True, False])
def test_fast_streamed_file_equals_reference(trio, tmp_path: Path, monkeypatch, method, n, params, block_bytes, threads, on_disk):
    """The blockwise file pass (2 compute threads + writer) writes the reference merge,
    with blocks straddling rows and chunks, read from files or from memory."""
    paths = {}
    for k, v in trio.items():
        paths[k] = tmp_path / f"{k}.safetensors"
        save_file(v, str(paths[k]))
    src = paths if on_disk else trio
    ins = [src[k] for k in "abc"[:n]]
    monkeypatch.setattr(executor, "FAST", False)
    ref = merge(method, [trio[k] for k in "abc"[:n]], base=trio["base"], **params)
    monkeypatch.setattr(executor, "FAST", True)
    monkeypatch.setattr(kernels, "CHUNK", 7)  # chunks straddle rows and tensors
    monkeypatch.setattr(reads, "BLOCK_BYTES", block_bytes)  # 40 bytes: blocks of 14-20 entries
    monkeypatch.setattr(writer, "COMPUTE_THREADS", threads)
    out = tmp_path / "out.safetensors"
    merge_to_file(method, ins, out, base=src["base"], durable=False, **params)
    with safe_open(str(out), "pt") as fh:
        got = {k: fh.get_tensor(k) for k in fh.keys()}
    assert _same(ref, got)


def test_block_jobs_cover_the_tensor_once(monkeypatch):
    monkeypatch.setattr(kernels, "CHUNK", 7)
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)
    jobs = writer.block_jobs("w", 100, torch.bfloat16)
    assert [(j.a, j.b) for j in jobs] == [(a, min(a + 14, 100)) for a in range(0, 100, 14)]  # 40 B // 2 B = 20 -> 14 (2 chunks)
    assert [(j.a, j.b) for j in writer.block_jobs("e", 0, torch.float32)] == [(0, 0)]
    assert reads.block_entries(7, 4) == 7  # a block is at least one chunk


def test_blockwise_file_merge_names_nan_input_and_writes_nothing(trio, tmp_path: Path, monkeypatch):
    bad = dict(trio["b"])
    bad["layers.0.up.weight"] = bad["layers.0.up.weight"].clone()
    bad["layers.0.up.weight"][11, 7] = float("inf")  # in the tensor's last block
    paths = {}
    for k, v in {"base": trio["base"], "a": trio["a"], "b": bad}.items():
        paths[k] = tmp_path / f"{k}.safetensors"
        save_file(v, str(paths[k]))
    monkeypatch.setattr(kernels, "CHUNK", 5)
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)
    out = tmp_path / "out.safetensors"
    for method, params in (("task_arithmetic", {}), ("ties", {"density": 1.0})):
        with pytest.raises(NonFiniteError, match="layers.0.up.weight"):
            merge_to_file(method, [paths["a"], paths["b"]], out, base=paths["base"], durable=False, **params)
        assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_streamed_reads_name_a_file_cut_short_after_its_header(trio, tmp_path: Path):
    """A file that loses its tail after the header was read (both streaming readers and
    the blockwise file merge): a named SourceError, and no output file."""
    from mmgrid.merge.tensors import from_safetensors

    path = tmp_path / "a.safetensors"
    save_file(trio["a"], str(path))
    src = from_safetensors(path)
    last = max(src.keys(), key=lambda n: src.locate(n)[1])
    n = trio["a"][last].numel()
    os.truncate(path, path.stat().st_size - 4)
    reader = reads.BlockReader([src])
    with pytest.raises(SourceError, match="truncated"):
        reader.read(0, last, 0, n, torch.empty(n * 4, dtype=torch.uint8))
    reader.close()
    chunks = reads.ChunkInput(src, last, n, n)
    with pytest.raises(SourceError, match="truncated"):
        chunks.chunk(0, n)
    chunks.close()
    for k in ("base", "b"):
        save_file(trio[k], str(tmp_path / f"{k}.safetensors"))
    out = tmp_path / "out.safetensors"
    with pytest.raises(SourceError, match="truncated"):
        merge_to_file("task_arithmetic", [path, tmp_path / "b.safetensors"], out, base=tmp_path / "base.safetensors", durable=False)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_write_blocks_keeps_file_order_and_reuses_buffers(tmp_path: Path, monkeypatch):
    """Blocks finishing out of order are still written in order; whole-tensor jobs sit
    between them; a fill error aborts with nothing left behind."""
    import random
    import time

    monkeypatch.setattr(kernels, "CHUNK", 4)
    monkeypatch.setattr(reads, "BLOCK_BYTES", 32)  # 8 float32 entries per block
    x = torch.arange(50, dtype=torch.float32)
    mid = torch.tensor([7, 8, 9], dtype=torch.int64)
    layout = [("x", (50,), torch.float32), ("mid", (3,), torch.int64), ("y", (50,), torch.float32)]
    jobs = writer.block_jobs("x", 50, torch.float32) + [writer.Job("mid", 0, 3, torch.int64, whole=lambda: mid)] \
        + writer.block_jobs("y", 50, torch.float32)
    rng = random.Random(0)

    def fill(job, out, work):
        time.sleep(rng.random() * 0.002)  # finish out of order
        out.copy_(x[job.a:job.b] * (1 if job.name == "x" else -1))

    w = SafetensorsWriter(tmp_path / "o.safetensors", layout)
    aw = writer.AsyncWriter(w)
    writer.write_blocks(jobs, fill, aw, n_threads=2)
    aw.drain()
    w.close()
    with safe_open(str(tmp_path / "o.safetensors"), "pt") as fh:
        assert torch.equal(fh.get_tensor("x"), x) and torch.equal(fh.get_tensor("y"), -x)
        assert torch.equal(fh.get_tensor("mid"), mid)

    def boom(job, out, work):
        if job.name == "y" and job.a >= 16:
            raise ValueError("fill failed")
        fill(job, out, work)

    w = SafetensorsWriter(tmp_path / "p.safetensors", layout)
    aw = writer.AsyncWriter(w)
    with pytest.raises(ValueError, match="fill failed"):
        try:
            writer.write_blocks(jobs, boom, aw, n_threads=2)
        finally:
            aw.drain()
    w.abort()
    assert not (tmp_path / "p.safetensors").exists() and not list(tmp_path.glob("*.partial"))


def test_write_blocks_pool_lends_the_same_buffers_to_every_call(tmp_path: Path, monkeypatch):
    """A pool passed to repeated calls (a sweep's points) gets its buffers back after each
    call and lends them again, so later calls allocate nothing; a whole-tensor job (64
    entries here) does not size the block buffers (8 entries)."""
    monkeypatch.setattr(kernels, "CHUNK", 4)
    monkeypatch.setattr(reads, "BLOCK_BYTES", 32)
    x = torch.arange(64, dtype=torch.float32)
    layout = [("big", (64,), torch.float32), ("x", (64,), torch.float32)]
    jobs = [writer.Job("big", 0, 64, torch.float32, whole=lambda: x)] + writer.block_jobs("x", 64, torch.float32)
    pool: dict = {}
    seen = []
    for k in range(3):
        w = SafetensorsWriter(tmp_path / "o.safetensors", layout, durable=False)
        aw = writer.AsyncWriter(w)
        writer.write_blocks(jobs, lambda job, out, work: out.copy_(x[job.a:job.b] + k), aw, n_threads=2, pool=pool)
        aw.drain()
        w.close()
        with safe_open(str(tmp_path / "o.safetensors"), "pt") as fh:
            assert torch.equal(fh.get_tensor("x"), x + k) and torch.equal(fh.get_tensor("big"), x)
        seen.append(sorted(b.data_ptr() for b in pool[torch.float32]))
        assert all(b.numel() == 8 for b in pool[torch.float32])
    assert seen[0] == seen[1] == seen[2] and 1 <= len(seen[0]) <= 8


def test_trim_by_hardshrink_equals_masked_fill():
    x = torch.cat([torch.randn(4096) * 0.003, torch.tensor([0.0, -0.0, 0.0025, -0.0025, float("nan"), float("inf")])])
    for thr in (0.0025, float(torch.tensor(1e-3)), 1e-30, 0.0):
        ref = x.clone().masked_fill_(x.abs() < thr, 0.0)
        lam = kernels.shrink_lambda(thr)
        got = x.clone() if lam is None else torch.hardshrink(x, lam)
        assert torch.equal(_bits(ref), _bits(got))


def test_fast_pass_names_nan_input(trio, monkeypatch):
    bad = dict(trio["b"])
    bad["layers.0.up.weight"] = bad["layers.0.up.weight"].clone()
    bad["layers.0.up.weight"][3, 2] = float("nan")
    monkeypatch.setattr(kernels, "CHUNK", 5)
    for method, params in (("task_arithmetic", {}), ("task_arithmetic", {"weights": [1.0, 0.0]}), ("ties", {"density": 1.0})):
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


@pytest.mark.parametrize("durable", [True, False])
def test_writer_replaces_an_existing_file_whole(tmp_path: Path, durable: bool):
    """A write over an existing file (renameat2 exchange when not durable, rename when
    durable) leaves the new content under the name and no temp file."""
    path = tmp_path / "o.safetensors"
    for value in (1.0, 2.0, 3.0):
        t = torch.full((1000,), value)
        w = SafetensorsWriter(path, [("x", (1000,), torch.float32)], durable=durable)
        w.write("x", t)
        w.close()
        with safe_open(str(path), "pt") as fh:
            assert torch.equal(fh.get_tensor("x"), t)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.safetensors"]


def test_writer_does_not_swap_a_directory_in(tmp_path: Path):
    (tmp_path / "o.safetensors").mkdir()
    w = SafetensorsWriter(tmp_path / "o.safetensors", [("x", (2,), torch.float32)], durable=False)
    w.write("x", torch.ones(2))
    with pytest.raises(OSError):
        w.close()
    assert (tmp_path / "o.safetensors").is_dir()


def test_finite_range_hand_cases():
    assert kernels.finite_range(torch.tensor([1.0, -2.0, 0.0]))
    assert kernels.finite_range(torch.empty(0))
    for bad in (float("nan"), float("inf"), float("-inf")):
        for dtype in (torch.float32, torch.bfloat16):
            assert not kernels.finite_range(torch.tensor([0.5, bad, -0.5], dtype=dtype))


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
    monkeypatch.setattr(kernels, "CHUNK", 7)
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)
    monkeypatch.setattr(sweep_mod, "SWEEP_BLOCK_BYTES", 40)
    for lam in (-0.5, 0.3, 0.5, 0.7, 1.0, 1.6):
        want = {k: ops.interpolate(t1[k], t2[k], lam).to(dtypes[0]) for k in t1}
        got = {"state_at": sw.state_at(lam), "interpolate_state": interpolate_state(t1, t2, lam)}
        monkeypatch.setattr(executor, "FAST", False)
        got["reference"] = merge("temporal", [t1, t2], lam=lam)
        monkeypatch.setattr(executor, "FAST", True)
        got["fast"] = merge("temporal", [t1, t2], lam=lam)
        for how, ins in (("file", [paths["t1"], paths["t2"]]), ("memory", [t1, t2])):
            merge_to_file("temporal", ins, tmp_path / "m.safetensors", lam=lam, durable=False)
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
