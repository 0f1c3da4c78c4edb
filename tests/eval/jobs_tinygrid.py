"""A tiny real grid, built once per session, for the tests that run the evaluation and the
cross-domain study in process and as executor jobs; each test gets its own copy of the
built registry. Also: an executor that runs each job here the way a worker would."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import pytest

from mmgrid.exec.base import Job, LocalExecutor
from mmgrid.exec.ray import WORKER_ENV, job_from_json, job_to_json

# 3 domains (3 pairs), 2 seeds, a text paradigm (emb: retention, the accuracy matrix, mergeable)
# and SASRec (no retention, not mergeable across domains: the skip path), capped sizes.
OVERRIDES = [
    "world.n_domains=3", "world.scale=0.3", "paradigms=[sasrec, emb]", "variants=[{name: default}]",
    "base.lm_epochs=0", "base.vocab_size=512", "train.max_examples=64", "train.seeds=[0, 1]", "train.device=cpu",
    "train.threads=1", "eval.max_users=40", "eval.retention_docs=5", "eval.matrix_paradigms=[emb]",
    "sweeps.cross_domain.paradigms=[emb, sasrec]", "sweeps.cross_domain.alphas=[0.0, 0.5]",
    "sweeps.cross_domain.methods={average: {}, task_arithmetic: {}}",
]
_ROOT: dict[str, Any] = {}


def _config(root: Path, registry: str) -> Any:
    from mmgrid.config import load_grid

    paths = [f"data.root={root / 'world'}", f"prepared={root / 'prepared'}", f"registry={root / registry}"]
    return load_grid("demo", OVERRIDES + paths)


def built_grid(factory: pytest.TempPathFactory, registry: str) -> tuple[Any, Any]:
    """(cfg, BuildResult) of the tiny grid, with a fresh copy ``registry`` of the built registry."""
    if "root" not in _ROOT:
        from mmgrid.data.pipeline import prepare
        from mmgrid.data.world_files import write_world
        from mmgrid.train.build import build_grid

        root = factory.mktemp("jobsgrid")
        cfg = _config(root, "registry-built")
        write_world(cfg.data.root, cfg.world)
        prepare(cfg)
        _ROOT["build"] = build_grid(cfg, progress=False)
        _ROOT["root"] = root
    root = _ROOT["root"]
    shutil.copytree(root / "registry-built", root / registry)
    return _config(root, registry), _ROOT["build"]


class WorkerLikeExecutor(LocalExecutor):
    """A :class:`LocalExecutor` whose jobs travel as JSON (:func:`job_to_json`), run with
    ``MMGRID_REGISTRY_WORKER=1`` and hand back a result that must survive JSON too."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future:
        job = job_from_json(job_to_json(job))
        self.jobs.append(job)
        old = os.environ.get(WORKER_ENV)
        os.environ[WORKER_ENV] = "1"
        try:
            fut = super().submit(job, deps)
        finally:
            os.environ.pop(WORKER_ENV) if old is None else os.environ.__setitem__(WORKER_ENV, old)
        if fut.exception() is not None:
            return fut
        out: Future = Future()
        out.set_result(json.loads(json.dumps(fut.result(), allow_nan=True)))
        return out


def records(reg: Any) -> pd.DataFrame:
    """Every result row of ``reg``, without the columns that differ between runs (record key and
    time; per-user files are content-addressed, so their paths stay), as strings, in a stable order."""
    df = reg.results().drop(columns=["key", "created"])
    df = df.astype(str)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def per_user_files(root: Any) -> dict[str, bytes]:
    """Relative path -> bytes of every per-user file of a registry."""
    base = Path(root) / "peruser"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}
