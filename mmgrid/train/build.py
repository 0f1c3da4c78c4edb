"""Building a grid: base -> pretrain -> p1 -> p2 for every (variant, paradigm, domain).

``build_grid`` validates the config, makes sure the base is in the registry, plans every
stage's checkpoint id up front (``Registry.make_id`` over coords, parent, training
params, a hash of the config parts that matter, seed), and submits one job per stage to
an executor with the previous stage as its dependency. A job whose id is already stored
returns at once, so a build that was killed restarts at the first unfinished stage and
ends with exactly the checkpoints an uninterrupted build makes (each stage starts from
its parent *as stored in the registry* and is seeded from the grid seed and its names).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmgrid.configtools import build as build_config
from mmgrid.configtools import stable_hash, to_dict
from mmgrid.errors import ConfigError, DataError, RegistryError

JOB_FN = "mmgrid.train.build:run_stage"


@dataclass(frozen=True)
class StagePlan:
    variant: str
    paradigm: str
    domain: str
    stage: str
    id: str
    parent_id: str
    first: bool


@dataclass
class BuildResult:
    """Ids of the base and of every stage, and what this run trained."""

    base_id: str
    stages: list[StagePlan] = field(default_factory=list)
    trained: list[str] = field(default_factory=list)  # ids trained by this call
    cached: list[str] = field(default_factory=list)  # ids already in the registry
    seconds: float = 0.0

    @property
    def ids(self) -> dict[tuple[str, str, str, str], str]:
        """(variant, paradigm, domain, stage) -> id."""
        return {(s.variant, s.paradigm, s.domain, s.stage): s.id for s in self.stages}

    def final_ids(self, variant: str = "default") -> dict[tuple[str, str], str]:
        """(paradigm, domain) -> id of the last stage of ``variant``."""
        last: dict[tuple[str, str], str] = {}
        for s in self.stages:
            if s.variant == variant:
                last[(s.paradigm, s.domain)] = s.id
        return last


# --------------------------------------------------------------------------- identity


def stage_params(cfg: Any, variant: Any, paradigm: str, stage: str) -> dict[str, Any]:
    """The training parameters of one stage (part of its id and lineage)."""
    t = cfg.train
    return {
        "stage": stage,
        "epochs": t.epochs[stage],
        "lr": t.lr,
        "weight_decay": t.weight_decay,
        "batch_size": t.batch_size,
        "max_examples": t.max_examples,
        "regularizer": variant.regularizer,
        "regularizer_params": dict(variant.params),
        "paradigm_params": dict(cfg.paradigm_params.get(paradigm, {})),
    }


def stage_config_hash(cfg: Any, base_id: str, fingerprint: str) -> str:
    """Hash of the config parts a stage depends on; eval / sweeps / exec sections are left out."""
    return stable_hash({"base": base_id, "data": fingerprint, "data_cfg": to_dict(cfg.data),
                        "stages": list(cfg.train.stages)})


def plan_stages(cfg: Any, registry: Any, base_id: str, domains: list[str], fingerprint: str) -> list[StagePlan]:
    """Every stage of the grid with its id, in an order where parents come first."""
    chash = stage_config_hash(cfg, base_id, fingerprint)
    plans = []
    for variant in cfg.variants:
        for paradigm in variant.paradigms or cfg.paradigms:
            for domain in domains:
                parent, first = base_id, True
                for stage in cfg.train.stages:
                    coords = {"paradigm": paradigm, "domain": domain, "period": stage, "variant": variant.name}
                    parents = [(parent, "init" if first else "previous_stage")]
                    sid = registry.make_id(coords, "trained", parents, stage_params(cfg, variant, paradigm, stage),
                                           chash, cfg.train.seed)
                    plans.append(StagePlan(variant.name, paradigm, domain, stage, sid, parent, first))
                    parent, first = sid, False
    return plans


def validate(cfg: Any) -> None:
    """Fail before any job runs: unknown paradigms, regularizers, bad regularizer params."""
    from mmgrid.models.builders import get_builder, parse_builder
    from mmgrid.paradigms import get_paradigm
    from mmgrid.train.regularizers import check_params

    name = parse_builder(cfg.base.model)
    if name is not None:
        get_builder(name)
    for p in cfg.paradigms:
        get_paradigm(p)
    for i, v in enumerate(cfg.variants):
        check_params(v.regularizer, v.params, where=f"variants[{i}]")
        for p in v.paradigms or []:
            if p not in cfg.paradigms:
                raise ConfigError(f"variants[{i}].paradigms: {p!r} is not in paradigms {cfg.paradigms}.")
    if not cfg.train.stages:
        raise ConfigError("train.stages: at least one stage is needed.")


# --------------------------------------------------------------------------- the build


def _absolute(cfg: Any) -> dict[str, Any]:
    d = to_dict(cfg)
    d["prepared"] = str(Path(cfg.prepared).resolve())
    d["registry"] = str(Path(cfg.registry).resolve())
    return d


def build_grid(cfg: Any, executor: Any = None, progress: bool = True) -> BuildResult:
    """Build (or finish building) every checkpoint of the grid.

    Args:
        cfg: a validated ``GridConfig``.
        executor: an ``mmgrid.exec`` executor (default: ``get_executor(cfg.exec.executor)``).
        progress: show progress bars.

    Returns:
        A :class:`BuildResult`.

    Raises:
        The first error of a failed stage (TrainingError, DataError, ModelError...), after
        every independent stage has been attempted; finished stages stay in the registry.
    """
    from mmgrid.exec.base import Job, get_executor
    from mmgrid.models.base import load_base
    from mmgrid.train.context import open_prepared, open_registry
    from mmgrid.train.device import set_threads

    t0 = time.perf_counter()
    validate(cfg)
    set_threads(cfg.train.threads)
    prepared = open_prepared(cfg.prepared)
    domains = _domains(cfg, prepared)
    _check_phases(prepared, domains, cfg.train.stages)
    registry = open_registry(cfg.registry)
    _, base_id = load_base(cfg.base, prepared, registry, seed=cfg.train.seed, progress=progress)
    plans = plan_stages(cfg, registry, base_id, domains, prepared.fingerprint)
    result = BuildResult(base_id, plans)
    had = {p.id for p in plans if registry.has(p.id)}
    owned = executor is None
    executor = executor or get_executor(cfg.exec.executor, cfg.exec.address)
    config = _absolute(cfg)
    futures: dict[str, Future] = {}
    try:
        for p in plans:
            job = Job(JOB_FN, {"config": config, "variant": p.variant, "paradigm": p.paradigm, "domain": p.domain,
                               "stage": p.stage, "parent_id": p.parent_id, "stage_id": p.id, "first": p.first,
                               "progress": progress},
                      resources={"num_cpus": 1, "num_gpus": cfg.exec.num_gpus_per_train},
                      name=f"{p.variant}/{p.paradigm}/{p.domain}/{p.stage}")
            deps = [] if p.first else [futures[p.parent_id]]
            futures[p.id] = executor.submit(job, deps)
        errors = [f.exception() for f in futures.values() if f.exception() is not None]
    finally:
        if owned:
            executor.shutdown()
        registry.sync()  # workers (Ray) write manifests only; the driver indexes them
    if errors:
        raise errors[0]
    result.cached = [p.id for p in plans if p.id in had]
    result.trained = [p.id for p in plans if p.id not in had]
    result.seconds = time.perf_counter() - t0
    return result


def plan_grid(cfg: Any, registry: Any = None, prepared: Any = None) -> BuildResult:
    """The grid's ids without training anything (for evaluating a built grid).

    Raises:
        RegistryError: the base is not in the registry yet (run ``mmgrid build`` first).
    """
    from mmgrid.models.base import base_identity
    from mmgrid.train.context import open_prepared, open_registry

    validate(cfg)
    prepared = prepared if prepared is not None else open_prepared(cfg.prepared)
    registry = registry if registry is not None else open_registry(cfg.registry)
    ident = base_identity(cfg.base, prepared.fingerprint, cfg.train.seed)
    base_id = registry.make_id(ident["coords"], ident["kind"], ident["parents"], ident["params"],
                               ident["config_hash"], ident["seed"])
    if not registry.has(base_id):
        raise RegistryError(f"registry {cfg.registry} has no base for this grid; run `mmgrid build` first.")
    plans = plan_stages(cfg, registry, base_id, _domains(cfg, prepared), prepared.fingerprint)
    done = [p for p in plans if registry.has(p.id)]
    return BuildResult(base_id, done, cached=[p.id for p in done])


def format_baseline_table(cfg: Any, registry: Any = None, prepared: Any = None, progress: bool = True) -> str:
    """Evaluate what is not evaluated yet, then the Table-2-style Markdown baseline table.

    Rows: the grid's paradigms (SASRec included) and the most-popular baseline; columns:
    domain x {R@K, N@K} for ``eval.ks``, all users, the last stage, variant ``default``.
    """
    from mmgrid.eval.grid import evaluate_grid
    from mmgrid.eval.table import baseline_table
    from mmgrid.train.context import open_registry

    registry = registry if registry is not None else open_registry(cfg.registry)
    plan = plan_grid(cfg, registry, prepared)
    evaluate_grid(cfg, plan, progress=progress, registry=registry, prepared=prepared)
    domains = list(dict.fromkeys(s.domain for s in plan.stages))
    return baseline_table(registry, cfg.paradigms, domains, ks=cfg.eval.ks, split=cfg.eval.split,
                          period=cfg.train.stages[-1])


def _check_phases(prepared: Any, domains: list[str], stages: list[str]) -> None:
    """Every stage needs examples in every domain: fail before training anything."""
    for d in domains:
        for stage in stages:
            if prepared.domain(d).examples(stage).height == 0:
                raise DataError(f"domain {d!r}: phase {stage!r} has no examples, so stage {stage!r} cannot be "
                                "trained; drop the domain (data.domains), widen data.phases or lower data.kcore.")


def _domains(cfg: Any, prepared: Any) -> list[str]:
    have = list(prepared.domains)
    if not cfg.data.domains:
        return have
    missing = [d for d in cfg.data.domains if d not in have]
    if missing:
        raise DataError(f"data.domains: {missing} are not in the prepared dataset {cfg.prepared} (it has {have}); "
                        "run `mmgrid prepare` again or fix data.domains.")
    return list(cfg.data.domains)


# --------------------------------------------------------------------------- one stage (a job)


def run_stage(config: dict[str, Any], variant: str, paradigm: str, domain: str, stage: str, parent_id: str,
              stage_id: str, first: bool, progress: bool = True) -> str:
    """Train one stage and store it; a no-op when ``stage_id`` is already stored.

    Runs as an executor job: every argument is JSON-able.

    Returns:
        The stage's checkpoint id.
    """
    from mmgrid.config import GridConfig
    from mmgrid.train.context import open_prepared, open_registry

    from mmgrid.train.device import set_threads

    cfg = build_config(GridConfig, config)
    set_threads(cfg.train.threads)
    registry = open_registry(cfg.registry)
    if registry.has(stage_id):
        return stage_id
    prepared = open_prepared(cfg.prepared)
    from mmgrid.train.stage import train_one_stage

    cid = train_one_stage(cfg, registry, prepared, variant, paradigm, domain, stage, parent_id, first, progress)
    if cid is not None and cid != stage_id:
        raise RegistryError(f"{paradigm}/{domain}/{stage}: stored as {cid} but planned as {stage_id}; "
                            "the identity used by the plan and by the job differ (a bug).")
    return stage_id
