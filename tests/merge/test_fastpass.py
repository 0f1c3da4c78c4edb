"""The fast pass (mmgrid.merge.fastpass) equals the reference path (mmgrid.merge.reference) bit for bit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from fastpass_data import _bits, _same, trio  # noqa: F401  (trio is a fixture)
from mmgrid.merge import merge, merge_to_file, ops
from mmgrid.merge.errors import NonFiniteError, SourceError
from mmgrid.merge.executor import REFERENCE, Route
from mmgrid.merge.fastpass import kernels, reads, writer
from mmgrid.merge.tensors import SafetensorsWriter


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
    ("ties", 3, {"density": 0.35, "weights": [1.0, 0.5, 2.0], "sign_rule": "weighted"}),  # mergekit's rule
    ("ties", 2, {"density": 0.3, "weights": [1.0, -0.5], "combine": "sum", "sign_rule": "weighted"}),
    ("ties", 2, {"density": 0.3, "sign_rule": "weighted"}),  # no weights: the weighted mass is the plain one
    ("slerp", 2, {"t": 0.3}),  # per-tensor coefficients from the first pass (BlockedDots)
    ("slerp", 2, {"t": 1.0}),
    ("model_stock", 3, {}),
    ("model_stock", 2, {"clamp_cos": False}),
    ("nuslerp", 2, {"weights": [0.3, 1.0]}),
]
# methods that hand the fast pass their own entrywise function (Kernel.fn), some after a first pass
OWN_FN = [
    ("ram", 2, {}),
    ("ram", 3, {"epsilon": 0.001}),  # some entries change in one input only
    ("ramplus_tl", 3, {}),
    ("ramplus_tl", 2, {"r": 0.5, "rho_max": 2.0, "epsilon": 0.001}),
    ("sce", 3, {}),  # the weights of the first pass (float64 means)
    ("sce", 2, {}),
    ("nearswap", 1, {"t": 0.001}),
    ("nearswap", 1, {"t": 0.0}),
    ("arcee_fusion", 1, {}),  # row KLs and exact quantiles from two first passes
]
CASES += OWN_FN
# mergekit's per-tensor top-X% (exact thresholds from two streaming first passes)
PER_TENSOR = [
    ("ties", 2, {"density": 0.2, "scope": "tensor"}),
    ("ties", 3, {"density": 0.35, "scope": "tensor", "weights": [1.0, 0.5, 2.0], "sign_rule": "weighted"}),
    ("ties", 2, {"density": 0.01, "scope": "tensor", "combine": "sum", "weights": [1.0, -0.5]}),  # k = 1 in small tensors
]
CASES += PER_TENSOR
# DARE with mergekit's L1 rescale: masks drawn and norms summed in a first pass, then entrywise
DARE_L1 = [
    ("dare", 2, {"p": 0.3, "rescale": "l1", "weights": [0.6, 0.3]}),
    ("dare", 3, {"p": 0.5, "rescale": "l1", "seed": 4}),
    ("ties_dare", 2, {"p": 0.3, "rescale": "l1", "density": 1.0, "scope": "tensor", "sign_rule": "weighted",
                      "combine": "sum", "weights": [0.5, 0.5]}),
    ("ties_dare", 3, {"p": 0.4, "rescale": "l1", "density": 1.0, "scope": "tensor", "combine": "disjoint_mean"}),
]
# DELLA with l1 / none: rows ranked and masks drawn in a first pass (pieces regrouped into rows)
DELLA_STREAMED = [
    ("della", 2, {"density": 0.5, "epsilon": 0.1, "rescale": "l1", "sign_rule": "weighted"}),
    ("della", 3, {"density": 0.6, "epsilon": 0.2, "rescale": "none", "combine": "sum", "weights": [0.7, 0.3, 0.5]}),
    ("della_linear", 2, {"density": 0.4, "epsilon": 0.15, "rescale": "l1", "weights": [0.6, 0.3]}),
]
DARE_L1 += DELLA_STREAMED
CASES += DARE_L1


@pytest.mark.parametrize("method,n,params", PER_TENSOR)
def test_per_tensor_top_x_streams_with_the_whole_tensor_bits(trio, method, n, params):
    """The per-tensor top-X% from streaming passes (first passes in chunks of 3 entries, merge
    chunks of 5) gives, tensor by tensor, the bits of the pipeline on the whole tensor (the
    k-th largest |tau| by torch.kthvalue)."""
    from mmgrid.merge import pipeline as pl
    from mmgrid.merge.methods import get_method, validate_params

    ins = [trio[k] for k in "abc"[:n]]
    got = merge(method, ins, base=trio["base"], route=Route(chunk=5, prepare_chunk=3), **params)
    cfg = get_method(method)(validate_params(method, params)).pipeline(n)
    for name, t in got.items():
        want = pl.merged(cfg, name, [x[name] for x in ins], trio["base"][name]).to(t.dtype)  # thresholds None: kthvalue
        assert torch.equal(_bits(want), _bits(t)), name


@pytest.mark.parametrize("method,n,params", CASES)
@pytest.mark.parametrize("chunk", [5, 1 << 18])
def test_fast_pass_equals_reference(trio, method, n, params, chunk):
    ins = [trio[k] for k in "abc"[:n]]
    base = trio["base"] if method not in ("average", "temporal", "slerp") else None
    ref = merge(method, ins, base=base, route=REFERENCE, **params)
    assert _same(ref, merge(method, ins, base=base, route=Route(chunk=chunk, prepare_chunk=chunk), **params))


@pytest.mark.parametrize("chunk", [3, 64])
def test_fast_pass_equals_reference_sampled_threshold(trio, monkeypatch, chunk):
    from mmgrid.merge import pipeline as pl

    monkeypatch.setattr(pl, "SAMPLE_TARGET", 50)  # a strided sample counted across tensors and chunks
    ins, params = [trio["a"], trio["b"]], {"density": 0.25}
    ref = merge("ties", ins, base=trio["base"], route=REFERENCE, **params)
    assert _same(ref, merge("ties", ins, base=trio["base"], route=Route(chunk=chunk, prepare_chunk=chunk + 2), **params))


@pytest.mark.parametrize("method,n,params", [CASES[0], CASES[1], CASES[3], CASES[5], CASES[9], *PER_TENSOR[::2], *DARE_L1,
                                            ("breadcrumbs_ties", 2, {"density": 0.5, "gamma": 0.1})])
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
    ref = merge(method, [trio[k] for k in "abc"[:n]], base=trio["base"], route=REFERENCE, **params)
    monkeypatch.setattr(reads, "BLOCK_BYTES", block_bytes)  # 40 bytes: blocks of 14-20 entries
    monkeypatch.setattr(writer, "COMPUTE_THREADS", threads)
    out = tmp_path / "out.safetensors"
    merge_to_file(method, ins, out, base=src["base"], durable=False, route=Route(chunk=7), **params)  # chunks straddle rows and tensors
    with safe_open(str(out), "pt") as fh:
        got = {k: fh.get_tensor(k) for k in fh.keys()}
    assert _same(ref, got)


@pytest.mark.parametrize("method,n,params", OWN_FN)
@pytest.mark.parametrize("block_bytes", [1 << 22, 40])
def test_own_function_kernels_stream_files_as_the_reference_path(trio, tmp_path: Path, monkeypatch, method, n, params,
                                                                  block_bytes):
    """A method's own entrywise function (Kernel.fn) on the blockwise file pass, blocks and
    compute chunks straddling rows and tensors, writes the reference path's bits; so does
    the in-memory fast pass at a chunk of 5 entries."""
    paths = {}
    for k, v in trio.items():
        paths[k] = tmp_path / f"{k}.safetensors"
        save_file(v, str(paths[k]))
    ins = [paths[k] for k in "abc"[:n]]
    ref = merge(method, [trio[k] for k in "abc"[:n]], base=trio["base"], route=REFERENCE, **params)
    monkeypatch.setattr(reads, "BLOCK_BYTES", block_bytes)
    out = tmp_path / "out.safetensors"
    merge_to_file(method, ins, out, base=paths["base"], durable=False, route=Route(chunk=7, prepare_chunk=11), **params)
    with safe_open(str(out), "pt") as fh:
        got = {k: fh.get_tensor(k) for k in fh.keys()}
    assert _same(ref, got)
    assert _same(ref, merge(method, ins, base=paths["base"], route=Route(chunk=5, prepare_chunk=3), **params))


def _masked_definitions(method: str, base: torch.Tensor, xs: list[torch.Tensor], stat: list[float]) -> torch.Tensor:
    """Each method's entries written with boolean masks, as the method modules state them
    (the kernels compute the same with float passes)."""
    b = base.float()
    ds = [x.float() - b for x in xs]
    if method == "ram":  # mean of the changes |tau| > eps (eps 1e-3)
        on = [d.abs() > 1e-3 for d in ds]
        num = sum(torch.where(m, d, 0.0) for m, d in zip(on, ds))
        return num / sum(m.float() for m in on).clamp(min=1.0) + b
    if method == "nearswap":  # t = 1e-3
        w = (1e-3 / (b - xs[0].float()).abs().clamp(min=1e-6)).clamp(0.0, 1.0)
        return w * xs[0].float() + (1.0 - w) * b
    if method == "sce":  # erase with weights stat
        sign = torch.where(sum(ds) >= 0, 1.0, -1.0)
        num, den = torch.zeros_like(b), torch.zeros_like(b)
        for d, wi in zip(ds, stat):
            agree = (d * sign) > 0
            num.add_(torch.where(agree, d, 0.0), alpha=wi)
            den.add_(agree.float(), alpha=wi)
        return num / den.clamp(min=1e-6) + b
    on = [d.abs() > 1e-3 for d in ds]  # ramplus_tl with lambda_i = stat
    count = sum(m.int() for m in on)
    share = torch.where(count > 1, 1.0 / count.clamp(min=1).float(), 0.0)
    out = torch.zeros_like(b)
    for d, m, lam in zip(ds, on, stat):
        out += torch.where(m, d, 0.0) * ((count == 1).float() * lam + share)
    return out + b


@pytest.mark.parametrize("method,params,stat", [("ram", {"epsilon": 0.001}, None), ("nearswap", {"t": 0.001}, None),
                                                ("sce", {}, [0.3, 0.5, 0.2]),
                                                ("ramplus_tl", {"epsilon": 0.001}, [1.02, 1.0, 1.15])])
def test_own_function_kernels_equal_their_masked_definitions(trio, method, params, stat):
    """The float-pass kernels give the bits of the boolean-mask formulas, in any chunking
    (chunks of 5 entries here, fresh buffers)."""
    from mmgrid.merge.methods import get_method, validate_params
    from mmgrid.merge.pipeline import apply_kernel

    m = get_method(method)(validate_params(method, params))
    name = "layers.0.up.weight"
    if method == "sce":
        m._w = {name: stat}
    if method == "ramplus_tl":
        m._lams = {name: stat}
    ins = [trio[k][name] for k in ("a",) if method == "nearswap"] or [trio[k][name] for k in "abc"]
    want = _masked_definitions(method, trio["base"][name], ins, stat)
    k = m.kernel(len(ins))
    flat = [t.reshape(-1) for t in [trio["base"][name], *ins]]
    pieces = [apply_kernel(k, name, [t[a:a + 5] for t in flat]) for a in range(0, flat[0].numel(), 5)]
    assert torch.equal(_bits(want.reshape(-1)), _bits(torch.cat(pieces)))


def test_block_jobs_cover_the_tensor_once(monkeypatch):
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)
    jobs = writer.block_jobs("w", 100, torch.bfloat16, chunk=7)
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
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)
    out = tmp_path / "out.safetensors"
    for method, params in (("task_arithmetic", {}), ("ties", {"density": 1.0}), ("ties", {"density": 0.3, "scope": "tensor"}), ("ram", {}), ("sce", {}),
                           ("ramplus_tl", {})):  # ram's threshold would compare the Inf away: inputs checked
        with pytest.raises(NonFiniteError, match="layers.0.up.weight"):
            merge_to_file(method, [paths["a"], paths["b"]], out, base=paths["base"], durable=False, route=Route(chunk=5), **params)
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

    monkeypatch.setattr(reads, "BLOCK_BYTES", 32)  # 8 float32 entries per block
    x = torch.arange(50, dtype=torch.float32)
    mid = torch.tensor([7, 8, 9], dtype=torch.int64)
    layout = [("x", (50,), torch.float32), ("mid", (3,), torch.int64), ("y", (50,), torch.float32)]
    jobs = writer.block_jobs("x", 50, torch.float32, chunk=4) + [writer.Job("mid", 0, 3, torch.int64, whole=lambda: mid)] \
        + writer.block_jobs("y", 50, torch.float32, chunk=4)
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
    monkeypatch.setattr(reads, "BLOCK_BYTES", 32)
    x = torch.arange(64, dtype=torch.float32)
    layout = [("big", (64,), torch.float32), ("x", (64,), torch.float32)]
    jobs = [writer.Job("big", 0, 64, torch.float32, whole=lambda: x)] + writer.block_jobs("x", 64, torch.float32, chunk=4)
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
    """ops.trim_magnitude (one hardshrink pass) zeroes exactly |x| < threshold, with the bits
    of the boolean-mask form (+0 where zeroed, NaN and Inf kept), in float32 and float64."""
    x = torch.cat([torch.randn(4096) * 0.003, torch.tensor([0.0, -0.0, 0.0025, -0.0025, float("nan"), float("inf")])])
    for dtype in (torch.float32, torch.float64):
        xd = x.to(dtype)
        for thr in (0.0025, float(torch.tensor(1e-3)), 1e-3, 1e-30, 0.0, -1.0, float("nan")):
            ref = xd.clone().masked_fill_(xd.abs() < thr, 0.0)
            assert torch.equal(_bits(ref), _bits(ops.trim_magnitude(xd.clone(), thr))), (dtype, thr)


def test_disjoint_mean_hand_case_and_mask_form():
    """TIES's disjoint mean by hand, and the float-indicator form equals the boolean-mask
    form sum_i w_i d_i [d_i s > 0] / sum_i w_i [d_i s > 0] (denominator 1 where none agrees)
    bit for bit, for positive, mixed-sign and zero-sum weights."""
    d = [torch.tensor([1.0, -2.0, 0.0, 3.0]), torch.tensor([3.0, 1.0, 0.0, -3.0])]
    sign = ops.elect_sign(d)
    assert torch.equal(sign, torch.tensor([1.0, -1.0, 1.0, 1.0]))
    assert torch.equal(ops.disjoint_mean(d, sign), torch.tensor([2.0, -2.0, 0.0, 3.0]))
    assert torch.equal(ops.disjoint_mean(d, sign, [1.0, 3.0]), torch.tensor([2.5, -2.0, 0.0, 3.0]))
    g = torch.Generator().manual_seed(3)
    ds = [torch.randn(5000, generator=g).masked_fill_(torch.rand(5000, generator=g) < 0.4, 0.0) for _ in range(3)]
    for ws in ([1.0, 0.5, 2.0], [1.0, -0.5, 0.25], [1.0, -1.0, 0.0]):
        s = ops.elect_sign(ds, ws, "weighted")
        num, den = torch.zeros(5000), torch.zeros(5000)
        for x, w in zip(ds, ws):
            num.add_((x * s).clamp_min(0.0), alpha=w)
            den.add_(((x * s) > 0).float(), alpha=w)
        want = num.mul_(s).div_(torch.where(den != 0, den, torch.ones(())))
        buf = [torch.full((5000,), float("nan")) for _ in range(3)]  # dirty buffers: fully overwritten
        assert torch.equal(_bits(want), _bits(ops.disjoint_mean(ds, s, ws)))
        assert torch.equal(_bits(want), _bits(ops.disjoint_mean(ds, s, ws, out=buf[0], den=buf[1], tmp=buf[2])))


def test_linear_combination_hand_case():
    """c_0 theta_0 + sum_i c_i theta_i; a zero coefficient skips its term unless the term holds
    NaN/Inf (which then reaches the result); -1 / +1 is x_1 - x_0 exactly."""
    b, x, y = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 5.0]), torch.tensor([float("inf"), 1.0])
    assert torch.equal(ops.linear_combination([b, x], (-1.0, [1.0])), torch.tensor([2.0, 3.0]))
    got = ops.linear_combination([b, x, y], (0.5, [0.25, 0.0]))
    assert got[0].isnan() and float(got[1]) == 0.5 * 2.0 + 0.25 * 5.0
    assert torch.equal(ops.linear_combination([x, b], (None, [2.0, -1.0])), torch.tensor([5.0, 8.0]))


def test_fast_pass_names_nan_input(trio, monkeypatch):
    bad = dict(trio["b"])
    bad["layers.0.up.weight"] = bad["layers.0.up.weight"].clone()
    bad["layers.0.up.weight"][3, 2] = float("nan")
    for method, params in (("task_arithmetic", {}), ("task_arithmetic", {"weights": [1.0, 0.0]}), ("ties", {"density": 1.0})):
        for route in (Route(chunk=5), REFERENCE):
            with pytest.raises(NonFiniteError, match="layers.0.up.weight"):
                merge(method, [trio["a"], bad], base=trio["base"], route=route, **params)


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


@pytest.mark.parametrize("params", [{"density": 0.3, "weights": [1.0, 0.5], "sign_rule": "weighted"},
                                    {"density": 0.3, "sign_rule": "unweighted"}])
def test_both_sign_rules_take_the_fast_pass(params):
    """TIES declares its Pipeline configuration once (Method.kernel): under either sign rule
    the kernel carries that configuration and is chunkable, so TIES is on the fast pass
    (the bitwise cases above then compare two routes through the same functions)."""
    from mmgrid.merge.methods import get_method, validate_params

    m = get_method("ties")(validate_params("ties", params))
    m.check_inputs(2)
    k = m.kernel(2)
    assert k is not None and k.chunkable and k.pipeline == m.pipeline(2)
    assert k.pipeline.sign_rule == params["sign_rule"] and k.pipeline.elect_sign
    dare = get_method("ties_dare")(validate_params("ties_dare", {"density": 0.3, "p": 0.2}))
    dare.check_inputs(2)
    assert not dare.kernel(2).chunkable  # DARE's masks are drawn per tensor: the reference route


def test_ramplus_added_rows_take_lambdas_from_their_own_counts(trio):
    """Added vocabulary rows are a view the first pass never saw: RAM+ gives them lambda_i from
    their own shared / unique change counts (lambda_i = 1 + r min(shared_i / unique_i, rho_max)),
    then the masked definition."""
    from mmgrid.merge.methods import get_method, validate_params
    from mmgrid.merge.methods.base import TensorView

    p = {"epsilon": 0.001, "r": 0.5, "rho_max": 2.0}
    m = get_method("ramplus_tl")(validate_params("ramplus_tl", p))
    name = "layers.0.up.weight"
    base, ins = trio["base"][name][:3], [trio[k][name][:3] for k in "abc"]
    on = [(t.float() - base.float()).abs() > p["epsilon"] for t in ins]
    count = sum(x.int() for x in on)
    lams = []
    for x in on:
        shared, unique = int((x & (count > 1)).sum()), int((x & (count == 1)).sum())
        lams.append(1.0 + p["r"] * min(shared / max(unique, p["epsilon"]), p["rho_max"]))
    want = _masked_definitions("ramplus_tl", base.float(), [t.float() for t in ins], lams)
    got = m.merge_tensor(TensorView(f"{name}[added]", ins, base, True))
    assert torch.allclose(got, want, rtol=1e-6, atol=0)


def test_passthrough_file_merge_is_a_copy_of_the_stored_bits(trio, tmp_path: Path, monkeypatch):
    """passthrough (scale 1) writes the input's stored bits, block by block (-0.0 and
    subnormals included), and refuses an input holding NaN/Inf, writing nothing; with another
    scale it takes the float32 kernel (the reference path's bits)."""
    src = dict(trio["a"])
    w = src["layers.0.up.weight"].clone()
    w[0, 0], w[0, 1] = -0.0, torch.finfo(w.dtype).tiny / 4  # a signed zero and a subnormal
    src["layers.0.up.weight"] = w
    path = tmp_path / "a.safetensors"
    save_file(src, str(path))
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)  # many blocks per tensor
    out = tmp_path / "out.safetensors"
    merge_to_file("passthrough", [path], out, durable=False, route=Route(chunk=5))
    with safe_open(str(out), "pt") as f:
        got = {k: f.get_tensor(k) for k in f.keys()}
    assert _same(got, src)
    for scale in (1.0, -0.5):
        assert _same(merge("passthrough", [src], scale=scale, route=Route(chunk=5)),
                     merge("passthrough", [src], scale=scale, route=REFERENCE))
    bad = dict(src)
    bad["layers.0.up.weight"] = w.clone()
    bad["layers.0.up.weight"][11, 7] = float("nan")
    save_file(bad, str(path))
    out.unlink()
    with pytest.raises(NonFiniteError, match="layers.0.up.weight"):
        merge_to_file("passthrough", [path], out, durable=False, route=Route(chunk=5))
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("method,n,params", DARE_L1)
def test_streamed_masks_equal_the_whole_tensor_rule(trio, method, n, params):
    """Each tensor of the streamed DARE-L1 / DELLA merge (first pass in chunks of 3 entries,
    merge chunks of 5) against the rule written out on whole tensors: the mask of
    masks.seeded_mask on the whole tensor (drop p, or DELLA's p_e = 1 - k_e from
    della_keep_probs), the kept task vector scaled by ||tau||_1 / ||m tau||_1 (l1; exact
    float64 sums here), then the pipeline's fuse."""
    from mmgrid.merge import masks, pipeline as pl
    from mmgrid.merge.methods import get_method, validate_params
    from mmgrid.merge.methods.della import della_keep_probs

    ins = [trio[k] for k in "abc"[:n]]
    got = merge(method, ins, base=trio["base"], route=Route(chunk=5, prepare_chunk=3), **params)
    meth = get_method(method)(validate_params(method, params))
    della = method.startswith("della")
    cfg = meth.fuse_config(n) if della else meth.pipeline(n)
    seed = params.get("seed", 0)
    for name, t in got.items():
        b = trio["base"][name].double()
        ds = []
        for i, x in enumerate(ins):
            d = x[name].double() - b
            drop = 1.0 - della_keep_probs(d.float(), params["density"], params["epsilon"]) if della else params["p"]
            keep = masks.seeded_mask(seed, name, i, drop, d.shape)
            md = torch.where(keep, d, torch.zeros((), dtype=d.dtype))
            before, after = float(d.abs().sum()), float(md.abs().sum())
            ds.append(md * (before / after) if params["rescale"] == "l1" and min(before, after) >= 1e-7 else md)
        want = pl.fuse(cfg, [d.float() for d in ds]).double() + b
        assert torch.allclose(t.double(), want, rtol=1e-2 if t.dtype == torch.bfloat16 else 1e-5, atol=1e-6), name


BREADCRUMBS = [
    ("breadcrumbs", 2, {"density": 0.5, "gamma": 0.1}),
    ("breadcrumbs", 3, {"density": 0.3, "gamma": 0.01, "weights": [0.7, 1.3, -0.2], "scale": 1.1}),
    ("breadcrumbs", 2, {"density": 0.95, "gamma": 0.2}),  # density + gamma > 1
    ("breadcrumbs_ties", 2, {"density": 0.5, "gamma": 0.1, "sign_rule": "weighted"}),
    ("breadcrumbs_ties", 3, {"density": 0.4, "gamma": 0.05, "combine": "disjoint_mean"}),
]


@pytest.mark.parametrize("method,n,params", BREADCRUMBS)
@pytest.mark.parametrize("chunk,prepare_chunk", [(5, 3), (7, 64), (1 << 18, 1 << 22)])
def test_breadcrumbs_streamed_equals_the_whole_tensor_selection(trio, method, n, params, chunk, prepare_chunk):
    """Breadcrumbs from its streaming cuts (histogram passes and tie positions, pieces cut
    anywhere) gives, tensor by tensor, the bits of sparsifying each whole task vector with
    breadcrumbs_keep (np.partition; ties by position) and fusing: the same masks. The bf16
    inputs have many equal magnitudes, so ties straddle the cuts; an all-zero task vector
    (every entry tied) is included."""
    from mmgrid.merge import pipeline as pl
    from mmgrid.merge.methods import get_method, validate_params

    ins = [dict(trio[k]) for k in "abc"[:n]]
    ins[0]["layers.0.up.weight"] = trio["base"]["layers.0.up.weight"].clone()  # tau = 0 everywhere
    got = merge(method, ins, base=trio["base"], route=Route(chunk=chunk, prepare_chunk=prepare_chunk), **params)
    m = get_method(method)(validate_params(method, params))
    for name, t in got.items():
        b = trio["base"][name]
        ds = [m.sparsify(name, i, x[name].float() - b.float()) for i, x in enumerate(ins)]
        want = pl.fuse(m.fuse_config(n), ds).add_(b).to(t.dtype)
        assert torch.equal(_bits(want), _bits(t)), name
