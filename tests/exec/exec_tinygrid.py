"""A tiny real grid for the executor tests: a synthetic world, prepared once per session,
and a registry holding only the base model, copied for each test that builds on it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

# Smallest settings that still run every real step: 2 domains, SASRec (no embedder),
# an untrained tiny base (its tokenizer is still trained), capped examples.
OVERRIDES = [
    "world.n_domains=2",
    "world.scale=0.3",
    "paradigms=[sasrec]",
    "variants=[{name: default}]",  # the demo's regularizer rows are semid-only
    "base.lm_epochs=0",
    "base.vocab_size=512",
    "train.max_examples=128",
    "train.seeds=[0]",  # one replicate (the demo grid has three)
    "train.device=cpu",
    "eval.max_users=50",
    "eval.retention=false",
    "sweeps.temporal.paradigm=sasrec",
    "sweeps.temporal.step=0.5",
]
_ROOT: dict[str, Path] = {}


def grid_config(root: Path, registry: str) -> Any:
    from mmgrid.config import load_grid

    paths = [f"data.root={root / 'world'}", f"prepared={root / 'prepared'}", f"registry={root / registry}"]
    return load_grid("demo", OVERRIDES + paths)


def tiny_grid(factory: pytest.TempPathFactory, registry: str) -> Any:
    """The tiny grid's config with a fresh registry ``registry`` that already holds the base."""
    if "root" not in _ROOT:
        from mmgrid.data.pipeline import prepare
        from mmgrid.data.world_files import write_world
        from mmgrid.registry.api import Registry
        from mmgrid.train.base_lm import ensure_base

        root = factory.mktemp("tinygrid")
        cfg = grid_config(root, "registry-base")
        write_world(cfg.data.root, cfg.world)
        prepared = prepare(cfg)
        reg = Registry.open(cfg.registry)
        ensure_base(cfg.base, prepared, reg, seed=cfg.train.seed, progress=False)
        reg.close()
        _ROOT["root"] = root
    root = _ROOT["root"]
    if (root / registry).exists():
        raise AssertionError(f"registry {registry} is used twice in the tiny grid")
    shutil.copytree(root / "registry-base", root / registry)
    return grid_config(root, registry)
