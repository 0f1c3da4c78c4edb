"""Building a grid: base -> pretrain -> p1 -> p2 for every (variant, paradigm, domain).

``build_grid`` makes sure the base is in the registry, plans every stage's checkpoint id
up front (:mod:`mmgrid.runtime.plan`: ``Registry.make_id`` over coords, parent, training
params, a hash of the config parts that matter, seed), for every training seed of
``train.seeds`` (the base is shared: trained once, with the first seed), and submits one job per stage
(:func:`mmgrid.train.stage.run_stage`) to an executor with the previous stage as its
dependency. A job whose id is already stored returns at once, so a build that was killed
restarts at the first unfinished stage and ends with exactly the checkpoints an
uninterrupted build makes (each stage starts from its parent *as stored in the registry*
and is seeded from the grid seed and its names).

The grid is checked by :func:`mmgrid.validate.validate_grid` (the one validation pass)
before this is called: every command does that; a script calling ``build_grid`` should too.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.config import GridConfig
from mmgrid.configtools import to_dict
from mmgrid.errors import DataError, RegistryError
from mmgrid.exec.args import executor_from_config
from mmgrid.exec.base import Job
from mmgrid.runtime.context import open_prepared, open_registry
from mmgrid.runtime.device import set_threads
from mmgrid.runtime.plan import BuildResult, StagePlan, grid_domains, plan_stages
from mmgrid.runtime.progress import progress as progress_bar
from mmgrid.runtime.remap import stale_stages
from mmgrid.train.base_lm import ensure_base

if TYPE_CHECKING:
    from mmgrid.data.dataset import PreparedDataset

JOB_FN = "mmgrid.train.stage:run_stage"

__all__ = ["JOB_FN", "BuildResult", "StagePlan", "build_grid"]


def build_grid(cfg: GridConfig, executor: Any = None, progress: bool = True, retrain: bool = False) -> BuildResult:
    """Build (or finish building) every checkpoint of the grid.

    Args:
        cfg: a ``GridConfig`` that passed :func:`mmgrid.validate.validate_grid`.
        executor: an ``mmgrid.exec`` executor (default: the grid's ``exec:`` section,
            :func:`mmgrid.exec.args.executor_from_config`: in this process, a local pool of
            ``exec.workers`` processes, or Ray).
        progress: show progress bars.
        retrain: train stages again even where the registry holds them under an earlier mmgrid's
            identity (default: refuse, naming ``mmgrid registry remap-ids``, before anything trains).

    Returns:
        A :class:`BuildResult`.

    Raises:
        RegistryError: stages to train are stored under an earlier identity (and not ``retrain``).
        The first error of a failed stage (TrainingError, DataError, ModelError...), after
        every independent stage has been attempted; finished stages stay in the registry.
    """
    t0 = time.perf_counter()
    set_threads(cfg.train.threads)
    prepared = open_prepared(cfg.prepared_dir)
    domains = grid_domains(cfg, prepared)
    _check_phases(prepared, domains, cfg.train.stages)
    registry = open_registry(cfg.registry_root)
    stale = 0 if retrain else stale_stages(cfg, registry, prepared)
    if stale:
        raise RegistryError(
            f"registry {cfg.registry} holds {stale} of this grid's checkpoints under the ids of an earlier mmgrid "
            "(ids are a function of content, not of how data.root is spelled); nothing was trained. Reuse them "
            "with `mmgrid registry remap-ids RUN` (seconds, no training; RUN: this grid or its run folder), then "
            "build again; or pass --retrain to train them anew.")
    _, base_id = ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed, progress=progress)
    plans = plan_stages(cfg, registry, base_id, domains, prepared.fingerprint)
    result = BuildResult(base_id, plans)
    had = {p.id for p in plans if registry.has(p.id)}
    owned = executor is None
    executor = executor or executor_from_config(cfg)
    config = _absolute(cfg)
    futures: dict[str, Future] = {}
    # overall ETA: stages still to train, done / total with an elapsed-based ETA
    several = len(cfg.train.seed_list) > 1
    overall = progress_bar(total=len(plans) - len(had), desc="build", unit="stage", enabled=progress, leave=True,
                           min_interval=0.0)
    ticked: set[str] = set()
    lock = threading.Lock()

    def tick(stage_id: str) -> None:  # one bar step per stage, whichever thread gets there first
        with lock:
            if stage_id not in ticked:
                ticked.add(stage_id)
                overall.update(1)

    try:
        for p in plans:
            job = Job(JOB_FN, {"config": config, "plan": asdict(p), "progress": progress},
                      resources={"num_cpus": 1, "num_gpus": cfg.exec.num_gpus_per_train},
                      name=f"{p.variant}/{p.paradigm}/{p.domain}/{p.stage}" + (f"/seed={p.seed}" if several else ""))
            if p.id in had:  # stored: no job (a pool or Ray would start workers just to answer a cache hit)
                futures[p.id] = Future()
                futures[p.id].set_result(p.id)
                continue
            deps = [] if p.first else [futures[p.parent_id]]
            futures[p.id] = executor.submit(job, deps)
            if p.id not in had:  # runs on the executor's thread (pool, Ray) or here (local)
                futures[p.id].add_done_callback(lambda _f, pid=p.id: tick(pid))  # type: ignore[misc]  # mypy infers no lambda with a default
        errors = [e for f in futures.values() if (e := f.exception()) is not None]
        for p in plans:  # a future is done before its callbacks have run: count what they have not yet
            if p.id not in had:
                tick(p.id)
    except BaseException:  # Ctrl-C: drop the jobs that have not started (pool, Ray) before shutting down
        cancel = getattr(executor, "cancel", None)
        if cancel is not None:
            cancel()
        raise
    finally:
        overall.close()
        if owned:
            executor.shutdown()
        registry.sync()  # workers (Ray, a process pool) write manifests only; the driver indexes them
    if errors:
        raise errors[0]
    result.cached = [p.id for p in plans if p.id in had]
    result.trained = [p.id for p in plans if p.id not in had]
    result.seconds = time.perf_counter() - t0
    return result


def _absolute(cfg: GridConfig) -> dict[str, Any]:
    """The grid as a job's JSON-able ``config`` (folders made absolute: a worker may start elsewhere)."""
    d = to_dict(cfg)
    d["prepared"] = str(Path(cfg.prepared_dir).resolve())
    d["registry"] = str(Path(cfg.registry_root).resolve())
    return d


def _check_phases(prepared: PreparedDataset, domains: list[str], stages: list[str]) -> None:
    """Every stage needs examples in every domain: fail before training anything."""
    for d in domains:
        for stage in stages:
            if prepared.domain(d).examples(stage).height == 0:
                raise DataError(f"domain {d!r}: phase {stage!r} has no examples, so stage {stage!r} cannot be "
                                "trained; drop the domain (data.domains), widen data.phases or lower data.kcore.")
