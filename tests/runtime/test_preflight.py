"""`mmgrid build`'s preflight: every check fails before the base trains or the first stage starts.

Each test writes a small prepared world once (module fixture), breaks one thing in the grid, runs
`mmgrid build` through the CLI entry point with the base trainer and the stage trainer replaced by
functions that fail the test if called, and checks the named error, its check and that the registry
holds nothing.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import yaml

import mmgrid.train.build as build_mod
import mmgrid.train.stage as stage_mod
from mmgrid.cli import main
from mmgrid.config import load_grid
from mmgrid.data.pipeline import prepare
from mmgrid.data.world_files import write_world
from mmgrid.errors import PreflightError
from mmgrid.runtime import preflight as pf


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-domain synthetic world, prepared (a few seconds, once)."""
    root = tmp_path_factory.mktemp("pfworld")
    cfg = load_grid("demo", ["world.n_domains=2", "world.scale=0.3", f"data.root={root / 'world'}",
                             f"prepared={root / 'prepared'}", f"registry={root / 'unused'}"])
    write_world(cfg.data.root, cfg.world)
    prepare(cfg, log=lambda *_a, **_k: None)
    return root


def _grid(world: Path, tmp_path: Path, **sections: dict) -> str:
    d = yaml.safe_load((Path(__file__).resolve().parents[2] / "grids" / "demo.yaml").read_text())
    d.update(name="pf", prepared=str(world / "prepared"), registry=str(tmp_path / "reg"))
    d["data"]["root"] = str(world / "world")
    d["paradigms"] = ["semid", "sasrec"]
    d["variants"] = [{"name": "default"}]
    d["exec"] = {"workers": 1}
    for key, value in sections.items():
        d[key] = {**(d.get(key) or {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(path)


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The base trainer and the stage trainer fail the test if anything reaches them."""
    called: list[str] = []

    def refuse(name: str):
        def f(*_a, **_k):
            called.append(name)
            raise AssertionError(f"{name} was called: the preflight should have stopped the build")
        return f

    monkeypatch.setattr(build_mod, "ensure_base", refuse("ensure_base"))
    monkeypatch.setattr(stage_mod, "train_one_stage", refuse("train_one_stage"))
    return called


def _refused(grid: str, tmp_path: Path, capsys: pytest.CaptureFixture, called: list[str], *extra: str) -> str:
    rc = main(["build", grid, "--no-progress", *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert called == []  # neither the base nor any stage started
    assert not (tmp_path / "reg" / "manifests").exists() or not any((tmp_path / "reg" / "manifests").rglob("*.json"))
    assert "preflight check" in err and "nothing was trained or written" in err
    return err


def test_a_good_grid_passes_every_check(world: Path, tmp_path: Path) -> None:
    cfg = load_grid(_grid(world, tmp_path))
    got = pf.preflight(cfg, "build")
    assert got.counts is not None and {c.name for c in got.counts} == {"Books", "Phones"}


def test_data_missing_prepared_dataset(world: Path, tmp_path: Path, capsys, no_training) -> None:
    grid = _grid(world, tmp_path, prepared=str(tmp_path / "nothing-here"))
    err = _refused(grid, tmp_path, capsys, no_training)
    assert "[data]" in err and "mmgrid prepare" in err and "nothing-here" in err


def test_folders_base_without_weights_and_missing_embedder(world: Path, tmp_path: Path, capsys, no_training) -> None:
    base = tmp_path / "qwen"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    grid = _grid(world, tmp_path, base={"model": str(base)}, paradigms=["text", "semid"],
                 paradigm_params={"text": {"embedder": str(tmp_path / "no-embedder")}})
    err = _refused(grid, tmp_path, capsys, no_training)
    assert err.count("[folders]") == 3  # base: no weights, no tokenizer; text's embedder: not a folder
    assert "no safetensors weights" in err and "no tokenizer files" in err and "no-embedder" in err


def test_folders_hub_id_not_in_the_cache(world: Path, tmp_path: Path, capsys, no_training, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(pf, "hub_cache_file", lambda repo, name: None)
    grid = _grid(world, tmp_path, base={"model": "nobody/not-a-model"})
    err = _refused(grid, tmp_path, capsys, no_training)
    assert "[folders]" in err and "hf download nobody/not-a-model" in err


def test_sizes_codebook_larger_than_the_catalog(world: Path, tmp_path: Path, capsys, no_training) -> None:
    grid = _grid(world, tmp_path, paradigm_params={"semid": {"codebook_size": 256}})
    err = _refused(grid, tmp_path, capsys, no_training)
    assert err.count("[sizes]") == 2 and "codebook_size=256 >" in err  # both domains, each named


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a host without CUDA")
def test_device_cuda_on_a_cpu_host(world: Path, tmp_path: Path, capsys, no_training) -> None:
    err = _refused(_grid(world, tmp_path, train={"device": "cuda"}), tmp_path, capsys, no_training)
    assert "[device] train.device='cuda' but no CUDA device is visible" in err


def test_device_bf16_on_a_gpu_without_it(world: Path, tmp_path: Path, capsys, no_training, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Old GPU")
    grid = _grid(world, tmp_path, train={"device": "cuda:3", "dtype": "bfloat16"})
    err = _refused(grid, tmp_path, capsys, no_training)
    assert "only 1 CUDA device(s)" in err and "does not support bfloat16" in err and err.count("[device]") == 2


def test_context_longest_example_beyond_the_base(world: Path, tmp_path: Path, capsys, no_training) -> None:
    # semid's collate: 8 + (max_history + 1) * levels + max_text_tokens + max_title_tokens = 8 + 201 * 3 + 24 + 16
    grid = _grid(world, tmp_path, paradigm_params={"semid": {"max_history": 200}})
    err = _refused(grid, tmp_path, capsys, no_training)
    assert "[context]" in err and "is 651 tokens" in err and "at most 512 positions" in err


def test_longest_examples_match_the_paradigms_collate_bounds(world: Path, tmp_path: Path) -> None:
    cfg = load_grid(_grid(world, tmp_path, paradigms=["text", "semid", "emb"],
                          paradigm_params={"text": {"max_history": 3, "max_title_tokens": 5}}))
    got = dict(pf.longest_examples(cfg))
    assert got["text prompt + title"] == 4 + 3 * (5 + 2) + 5 + 4  # text.collate's max_len
    assert got["semid prompt + codes"] == 8 + 11 * 3 + 24 + 16  # the knobs' defaults
    assert got["emb item text"] == 16 and got["base.max_length (LM and retention text)"] == 64


def test_disk_too_little_free_space(world: Path, tmp_path: Path, capsys, no_training, monkeypatch) -> None:
    real = pf.shutil.disk_usage
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    err = _refused(_grid(world, tmp_path), tmp_path, capsys, no_training)
    assert "[disk]" in err and "GiB are free" in err


def test_disk_estimate_bounds_and_threshold(world: Path, tmp_path: Path) -> None:
    from mmgrid.models.builders import tiny_qwen3

    cfg = load_grid(_grid(world, tmp_path))
    p = pf.preflight(cfg, "build", skip=("disk",))
    need = pf.pending_checkpoint_bytes(p)
    # 2 paradigms x 2 domains: 12 stages on seed 0, 8 on each of seeds 1 and 2 (pretrain shared) = 28; 14 of
    # them semid, each at least the tiny base's parameters (float32), plus 3 x 16 code rows in and out
    base = sum(t.numel() for t in tiny_qwen3(2048).parameters())
    assert 14 * 4 * base <= need <= 4 * base + 28 * 4 * (base + 2 * 48 * 64)
    free = float(pf.shutil.disk_usage(tmp_path).free)
    assert pf.check_disk(p, lambda _p: free / pf.DISK_MARGIN * 0.5) == []
    assert [c for c, _ in pf.check_disk(p, lambda _p: free / pf.DISK_MARGIN * 1.5)] == ["disk"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the block ends: nothing listens there


def test_ray_cluster_unreachable(world: Path, tmp_path: Path, capsys, no_training) -> None:
    grid = _grid(world, tmp_path)
    err = _refused(grid, tmp_path, capsys, no_training, "--executor", "ray", "--address", f"127.0.0.1:{_closed_port()}")
    assert "[ray]" in err


def test_ray_reachable_address_passes_and_unset_address_is_not_checked(world: Path, tmp_path: Path) -> None:
    cfg = load_grid(_grid(world, tmp_path))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        problems = pf.check_ray(pf.Preflight(cfg, executor="ray", address=f"ray://127.0.0.1:{port}"))
    if pf.importlib.util.find_spec("ray") is None:
        assert [c for c, _ in problems] == ["ray"]  # not installed: that is the failure
    else:
        assert problems == []
    assert pf.check_ray(pf.Preflight(cfg, executor="local", address="127.0.0.1:1")) == []


def test_every_failure_is_reported_together(world: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = load_grid(_grid(world, tmp_path, train={"device": "cuda"},
                          paradigm_params={"semid": {"codebook_size": 999, "max_history": 300}}))
    with pytest.raises(PreflightError) as info:
        pf.preflight(cfg, "build")
    assert set(info.value.checks) == {"sizes", "device", "context"}
    assert str(info.value).count("\n  [") == len(info.value.failures)


def test_validate_says_which_warnings_build_refuses(tmp_path: Path, capsys) -> None:
    assert main(["validate", "amazon2023", f"prepared={tmp_path / 'none'}"]) == 0
    out = capsys.readouterr().out
    refused = [line for line in out.splitlines() if "`mmgrid build` refuses this" in line]
    assert any("embedder" in line and "(preflight check: folders)" in line for line in refused)
    assert any("no raw files" in line for line in refused)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a host without CUDA")
def test_sweep_and_calibrate_run_the_preflight_first(world: Path, tmp_path: Path, capsys) -> None:
    grid = _grid(world, tmp_path, train={"device": "cuda"})
    assert main(["sweep", "temporal", grid]) == 2
    err = capsys.readouterr().err
    assert "mmgrid sweep temporal: 1 preflight check failed" in err and "[device]" in err
    out = tmp_path / "cal"
    assert main(["calibrate", "demo", "--out", str(out), "--quick", "train.device=cuda"]) == 2
    assert "[device]" in capsys.readouterr().err and not out.exists()
