"""grids/amazon2023.yaml: the paper's settings, validated without any network access."""

from __future__ import annotations

import importlib
import socket
import sys
from pathlib import Path

import pytest

from mmgrid.config import load_grid
from mmgrid.config import PAPER_PHASES
from mmgrid.exec.validate import AMAZON2023_CATEGORIES, check_scale

GRID = Path(__file__).resolve().parents[2] / "grids" / "amazon2023.yaml"
PAPER_DOMAINS = [
    "Video_Games",
    "Movies_and_TV",
    "Cell_Phones_and_Accessories",
    "Sports_and_Outdoors",
    "Books",
    "Health_and_Household",
]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_paper_settings() -> None:
    cfg = load_grid(GRID)
    assert cfg.data.source == "amazon2023" and cfg.data.domains == PAPER_DOMAINS
    assert cfg.data.phases == PAPER_PHASES  # pretrain < 2022-07-01 <= p1 < 2022-10-01 <= p2 < 2023-01-01 <= test
    assert cfg.base.model == "Qwen/Qwen3-0.6B" and cfg.base.allow_download is False
    assert cfg.train.stages == ["pretrain", "p1", "p2"]
    assert cfg.train.epochs == {"pretrain": 3, "p1": 2, "p2": 2}
    semid = cfg.paradigm_params["semid"]
    assert (semid["levels"], semid["codebook_size"]) == (4, 256)
    assert {"text", "semid", "emb"} <= set(cfg.paradigms)
    assert cfg.sweeps.temporal.paradigm == "emb"
    assert cfg.exec.num_gpus_per_train == 1


def _paradigm_defaults(name: str) -> dict:
    from mmgrid.paradigms import get_paradigm

    par = get_paradigm(name)
    return importlib.import_module(type(par).__module__).DEFAULTS


def test_paradigm_params_are_known_to_the_paradigms() -> None:
    from mmgrid.paradigms.params import resolve_params

    cfg = load_grid(GRID)
    for name, params in cfg.paradigm_params.items():
        resolve_params(params, _paradigm_defaults(name), f"paradigm_params.{name}")  # raises on unknown keys


def test_validate_command_downloads_nothing(no_network: None, capsys: pytest.CaptureFixture[str]) -> None:
    from mmgrid.cli import main

    assert main(["validate", str(GRID)]) == 0
    assert "valid grid 'amazon2023'" in capsys.readouterr().out
    assert main(["validate", "amazon2023", "train.seed=1"]) == 0  # by packaged name, with an override


def test_scale_warnings_until_data_and_models_are_in_place(tmp_path: Path) -> None:
    warnings = check_scale(load_grid(GRID, [f"data.root={tmp_path}"]))
    assert any("no raw files yet" in w and "Books" in w for w in warnings)
    assert any("embedder" in w for w in warnings)
    for d in PAPER_DOMAINS:  # the Amazon 2023 layout, plain or gzipped
        (tmp_path / "raw" / "review_categories").mkdir(parents=True, exist_ok=True)
        (tmp_path / "raw" / "meta_categories").mkdir(parents=True, exist_ok=True)
        (tmp_path / "raw" / "review_categories" / f"{d}.jsonl.gz").write_bytes(b"")
        (tmp_path / "raw" / "meta_categories" / f"meta_{d}.jsonl").write_bytes(b"")
    emb = tmp_path / "Qwen3-Embedding-8B"
    emb.mkdir()
    ready = load_grid(
        GRID,
        [f"data.root={tmp_path}", f"paradigm_params.text.embedder={emb}", f"paradigm_params.semid.embedder={emb}"],
    )
    assert check_scale(ready) == []


def test_scale_warnings_on_names_and_resources() -> None:
    cfg = load_grid(GRID, ["data.domains=[Video_Game]", "train.device=cpu", "exec.address=auto"])
    text = "\n".join(check_scale(cfg))
    assert "did you mean 'Video_Games'" in text
    assert "GPUs would sit idle" in text
    assert "shared folder" in text
    assert set(PAPER_DOMAINS) <= set(AMAZON2023_CATEGORIES)


def test_demo_grid_has_no_scale_warnings() -> None:
    assert check_scale(load_grid("demo")) == []


def test_validation_imports_neither_torch_nor_ray(tmp_path: Path) -> None:
    import subprocess

    code = (
        "import sys; from mmgrid.config import load_grid; from mmgrid.exec.validate import check_scale; "
        f"check_scale(load_grid({str(GRID)!r})); print('torch' in sys.modules, 'ray' in sys.modules)"
    )
    root = str(GRID.parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.split() == ["False", "False"]
