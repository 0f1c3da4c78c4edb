"""torchrun helpers: rank seeding, sharding, and a 2-process gloo run of a toy entry point
that must follow the one-process trajectory, end with equal parameters on both ranks,
and write its output on rank 0 only."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmgrid.errors import ConfigError
from mmgrid.exec.ddp import (
    DistContext,
    all_reduce_mean,
    broadcast_object,
    is_main,
    local_batch_size,
    seed_for_rank,
    shard,
    unwrap_model,
    wrap_model,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TOY = HERE / "ddp_toy.py"


@given(st.lists(st.integers(), max_size=40), st.integers(1, 5))
def test_shard_is_an_equal_strided_cover(items: list[int], world: int) -> None:
    shards = [shard(items, DistContext(rank=r, world_size=world)) for r in range(world)]
    assert len({len(s) for s in shards}) == 1  # DDP needs the same number of steps on every rank
    merged = [s[i] for i in range(len(shards[0])) for s in shards]  # interleave back
    assert merged[: len(items)] == items
    assert len(merged) - len(items) < world  # at most world-1 repeated items
    pad = len(merged) - len(items)
    assert merged[len(items) :] == [items[i % len(items)] for i in range(pad)]  # cyclic repeat


def test_seed_for_rank() -> None:
    assert seed_for_rank(7, 0) == 7  # one process behaves like rank 0
    seeds = {seed_for_rank(7, r) for r in range(64)}
    assert len(seeds) == 64
    with pytest.raises(ConfigError):
        seed_for_rank(0, -1)


def test_local_batch_size() -> None:
    assert local_batch_size(32, DistContext(world_size=4)) == 8
    with pytest.raises(ConfigError, match="divisible"):
        local_batch_size(30, DistContext(world_size=4))


def test_single_process_context_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    ctx = DistContext.from_env(device="cpu")
    assert (ctx.rank, ctx.world_size, ctx.device, ctx.is_main, ctx.distributed) == (0, 1, "cpu", True, False)
    model = torch.nn.Linear(2, 2)
    assert wrap_model(model, ctx) is model and unwrap_model(model) is model
    assert all_reduce_mean(2.5, ctx) == 2.5
    assert broadcast_object({"id": "abc"}, ctx) == {"id": "abc"}
    ctx.close()
    assert is_main()
    monkeypatch.setenv("RANK", "1")
    assert not is_main()


def test_bad_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ConfigError, match="RANK=2"):
        DistContext.from_env(device="cpu")
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ConfigError, match="not an integer"):
        DistContext.from_env(device="cpu")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def _torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def _load(path: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return {"meta": f.metadata(), **{k: f.get_tensor(k) for k in f.keys()}}


@pytest.mark.slow
def test_torchrun_two_ranks_follow_the_single_process_run(tmp_path: Path) -> None:
    import torch

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    subprocess.run([sys.executable, str(TOY), str(one)], env=_env(), check=True, timeout=120, cwd=ROOT)
    cmd = _torchrun() + ["--standalone", "--nproc_per_node=2", str(TOY), str(two)]
    proc = subprocess.run(cmd, env=_env(), timeout=180, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # Only rank 0 wrote its output; both ranks got rank 0's id by broadcast.
    assert sorted(p.name for p in two.glob("output_*")) == ["output_rank0.json"]
    out = json.loads((two / "output_rank0.json").read_text())
    assert out["world_size"] == 2 and out["n_local"] == 26
    r0, r1, single = _load(two / "params_rank0.safetensors"), _load(two / "params_rank1.safetensors"), _load(
        one / "params_rank0.safetensors"
    )
    assert r0["meta"]["id"] == r1["meta"]["id"] == r0["meta"]["own"] == out["id"]
    # The ranks started from different seeds; DDP's broadcast and all-reduce keep them identical.
    names = [k for k in r0 if k != "meta"]
    assert names and all(torch.equal(r0[k], r1[k]) for k in names)
    # Strided shards + half the batch per rank = the one-process batches: same trajectory.
    assert all(torch.allclose(r0[k], single[k], atol=1e-5) for k in names)
    single_out = json.loads((one / "output_rank0.json").read_text())
    assert out["mean_last_loss"] == pytest.approx(single_out["mean_last_loss"], rel=1e-4)


def _manifests(root: Path) -> set[str]:
    return {p.stem for p in (root / "manifests").rglob("*.json")}


@pytest.mark.slow
def test_torchrun_real_stage_writes_exactly_one_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One real training stage (SASRec, tiny data) on 2 gloo ranks: one checkpoint, the planned id."""
    sys.path.insert(0, str(HERE))
    from exec_tinygrid import tiny_grid

    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.plan import plan_stages

    cfg = tiny_grid(tmp_path_factory, "registry-ddp")
    reg = Registry.open(cfg.registry)
    prepared = load_prepared(cfg.prepared)
    base_id = reg.query(kind="base")["id"].iloc[0]
    plan = plan_stages(cfg, reg, base_id, list(prepared.domains), prepared.fingerprint)[0]
    job = {"config": cfg.to_dict(), "plan": dataclasses.asdict(plan), "progress": False}
    out = tmp_path_factory.mktemp("ddp-stage")
    (out / "job.json").write_text(json.dumps(job))
    before = _manifests(Path(cfg.registry))
    script = [str(HERE / "ddp_stage.py"), str(out / "job.json"), str(out)]
    cmd = _torchrun() + ["--standalone", "--nproc_per_node=2", *script]
    proc = subprocess.run(cmd, env=_env(), timeout=300, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _manifests(Path(cfg.registry)) - before == {plan.id}  # exactly one checkpoint, the planned one
    returned = sorted(p.read_text() for p in out.glob("returned_rank*.txt"))
    assert returned == [plan.id, plan.id]  # rank 1 got rank 0's id
    reg.sync()
    m = reg.get(plan.id)
    assert (m.coords["domain"], m.coords["period"], m.kind) == (plan.domain, plan.stage, "trained")
