"""The temporal study (``mmgrid sweep temporal``): lambda sweeps between t1 and t2 per domain.

MMGRid section 5: theta(lambda) = theta_t1 + lambda * (theta_t2 - theta_t1) (Eq. 9-10)
for lambda on a grid (default 0.0 to 1.5 in steps of 0.05), evaluated on the test window
for all, active and non-active users. lambda* per domain and group is the argmax of
NDCG@10 (ties go to the lambda closest to 1; :mod:`mmgrid.sweep.selection`).

Each domain's model is built once from the t2 checkpoint; every sweep point writes
theta(lambda) into it in place (:class:`InPlaceInterpolator`) and is evaluated in memory
by an evaluator that caches the weight-independent work. No point is written as a
checkpoint; each evaluation is recorded with a recipe naming its input ids, so every
number can be traced back to them, with its per-user values (``extra.per_user``) and the
replicate's training seed (``extra.seed``). The sweep runs on every training seed's
replicate (``train.seeds``): the same users, each seed's own t1 and t2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from mmgrid.runtime.gather import gather
from mmgrid.runtime.progress import progress as progress_bar

from mmgrid.config import GridConfig, grid_from_dict
from mmgrid.data.dataset import load_prepared
from mmgrid.errors import ConfigError, MmgridError
from mmgrid.exec.base import Job
from mmgrid.paradigms import get_paradigm
from mmgrid.registry import Registry
from mmgrid.registry.errors import AmbiguousCheckpointError, UnknownCheckpointError
from mmgrid.registry.names import hash_json
from mmgrid.runtime.checkpoints import load_checkpoint
from mmgrid.runtime.plan import BuildResult, planned_ids
from mmgrid.eval.ranking import record_evaluation
from mmgrid.sweep.evaluation import EvaluatorFactory, default_evaluator_factory, eval_key, paradigm_params
from mmgrid.sweep.interpolate import InPlaceInterpolator, interpolate_state
from mmgrid.sweep.results import recorded, study_frame
from mmgrid.sweep.selection import lambda_grid

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.exec.base import Executor

STUDY = "temporal"
COLUMNS = ["study", "paradigm", "variant", "domain", "eval_domain", "group", "lambda", "metric", "value",
           "p1_id", "p2_id", "recipe_hash", "seed"]


def periods(cfg: GridConfig) -> tuple[str, str]:
    """(t1, t2): the last two training stages (the paper's p1 and p2)."""
    stages = list(cfg.train.stages)
    if len(stages) < 2:
        raise ConfigError(f"train.stages {stages}: the temporal study needs at least two stages (t1 and t2).")
    return stages[-2], stages[-1]


def recipe(p1: str, p2: str, lam: float, evaluation: dict[str, Any] | None = None) -> dict[str, Any]:
    """The recipe of one sweep point: Eq. 10 on two registry checkpoints (+ the eval settings)."""
    return {"method": "temporal", "equation": "MMGRid Eq. 10", "inputs": [p1, p2], "roles": ["t1", "t2"],
            "lambda": float(lam), "eval": evaluation or {}}


@dataclass(frozen=True)
class DomainSweep:
    """What one domain's sweep evaluates.

    Attributes:
        domain: domain name.
        lambdas: evaluate these instead of the configured grid (None: ``sweeps.temporal``'s grid).
        seed: the training seed of the replicate swept (None: ``train.seed``, the first).
        study: the ``study`` key recorded with each evaluation.
        store: also store each theta(lambda) as a merged checkpoint with lineage (only for a
            handful of chosen lambdas, e.g. lambda_hat*; the sweep itself never stores).
        redo: evaluate again even when the registry already holds every point (a cache hit
            returns the stored rows without loading any model).
    """

    domain: str
    lambdas: list[float] | None = None
    seed: int | None = None
    study: str = STUDY
    store: bool = False
    redo: bool = False


@dataclass(frozen=True)
class _Pair:
    """One domain's t1 and t2 checkpoints (ids, loaded t1 state, loaded t2) and their periods."""

    domain: str
    p1: str
    p2: str
    theta1: dict
    ck2: Any
    periods: tuple[str, str]


def sweep_domain(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", what: DomainSweep | str,
                 evaluator_factory: EvaluatorFactory | None = None) -> list[dict[str, Any]]:
    """Sweep lambda for one domain, record every evaluation, return long rows.

    Args:
        cfg: the grid (``sweeps.temporal`` picks paradigm, variant and the lambda grid).
        registry: an open registry with the domain's t1 and t2 checkpoints.
        prepared: the prepared dataset.
        what: the domain and the options of its sweep (:class:`DomainSweep`; a domain name: the defaults).
        evaluator_factory: builds the in-memory evaluator (default: :mod:`mmgrid.eval`).

    Returns:
        One dict per (lambda, group, metric), columns :data:`COLUMNS`.
    """
    what = DomainSweep(what) if isinstance(what, str) else what
    domain, lambdas, study, store = what.domain, what.lambdas, what.study, what.store
    t = cfg.sweeps.temporal
    t1, t2 = periods(cfg)
    seed = cfg.train.seed if what.seed is None else int(what.seed)
    p1, p2 = period_ids(registry, t.paradigm, t.variant, domain, (t1, t2), seed, planned_ids(cfg, registry, prepared))
    grid = [round(float(x), 9) for x in (lambdas if lambdas is not None else lambda_grid(t.start, t.stop, t.step))]
    ev = eval_key(cfg)
    hashes = [hash_json(recipe(p1, p2, lam, ev)) for lam in grid]
    if not what.redo and not store and set(hashes) <= recorded(registry, hashes, study):
        return _stored_rows(registry, study, hashes)
    paradigm = get_paradigm(t.paradigm)
    data = prepared.domain(domain)
    ck1, ck2 = load_checkpoint(registry, p1), load_checkpoint(registry, p2)
    model = paradigm.load(ck2, data, paradigm_params(cfg, t.paradigm))
    model.eval()
    evaluate = (evaluator_factory or default_evaluator_factory)(cfg, t.paradigm, paradigm, data, prepared)
    interp = InPlaceInterpolator(model, ck1.state, ck2.state)
    pair = _Pair(domain, p1, p2, ck1.state, ck2, (t1, t2))
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        for lam in grid:
            interp.apply(lam)
            rec = recipe(p1, p2, lam, ev)
            cid = _store_point(registry, pair, lam, t) if store else None
            extra = {"study": study, "paradigm": t.paradigm, "variant": t.variant, "domain": domain,
                     "eval_domain": domain, "period": f"{t1}-{t2}", "lambda": lam, "method": "temporal", "seed": seed}
            recorded_groups = record_evaluation(registry, cid, cfg.eval.split, evaluate(model), recipe=rec, extra=extra)
            for group, metrics in recorded_groups.items():
                for metric, value in metrics.items():
                    rows.append({"study": study, "paradigm": t.paradigm, "variant": t.variant, "domain": domain,
                                 "eval_domain": domain, "group": group, "lambda": lam, "metric": metric,
                                 "value": float(value), "p1_id": p1, "p2_id": p2, "recipe_hash": hash_json(rec),
                                 "seed": seed})
    return rows


def _stored_rows(registry: Registry, study: str, hashes: list[str]) -> list[dict[str, Any]]:
    """The rows of already recorded sweep points (newest per point, group and metric)."""
    df = study_frame(registry, study, recipe_hash=list(hashes))
    rec = df["recipe"].map(_inputs)
    df = df.assign(p1_id=rec.map(lambda r: r[0]), p2_id=rec.map(lambda r: r[1]), study=study,
                   **{"lambda": df["lambda"].astype(float).round(9)})
    df = df.drop_duplicates(["recipe_hash", "group", "metric"], keep="last")
    return df[COLUMNS].to_dict("records")


def period_ids(registry: Registry, paradigm: str, variant: str, domain: str, pers: tuple[str, str],
               seed: int | None = None, plan: BuildResult | None = None) -> tuple[str, str]:
    """Ids of the trained t1 and t2 checkpoints of one grid cell row (of one training seed's
    replicate): the ids ``plan`` computes (:func:`mmgrid.runtime.plan.planned_ids`), else by coords."""
    coords = {"paradigm": paradigm, "domain": domain, "variant": variant, "kind": "trained"}
    return (seeded_id(registry, {**coords, "period": pers[0]}, seed, plan),
            seeded_id(registry, {**coords, "period": pers[1]}, seed, plan))


def seeded_id(registry: Registry, coords: dict[str, Any], seed: int | None, plan: BuildResult | None = None) -> str:
    """The checkpoint with these coords and training seed.

    With ``plan`` (the grid's planned ids, :func:`mmgrid.runtime.plan.planned_ids`) the stage's
    planned id when it is stored: other checkpoints with the same coordinates (an earlier
    mmgrid's ids, another data spelling, an import) never make it ambiguous. Else by coords: one
    stored without a seed (imported, or put by hand) answers for any seed when it is the only one
    with these coords; ``seed=None``: the only checkpoint with these coords, else the lowest seed's
    replicate."""
    if plan is not None:
        cid = plan.id_of(str(coords.get("paradigm")), str(coords.get("domain")), str(coords.get("period")),
                         str(coords.get("variant", "default")), seed)
        if cid is not None and registry.has(cid):
            return cid
    if seed is None:
        try:
            return registry.resolve(coords)
        except AmbiguousCheckpointError:
            seeds = registry.query(**coords)["seed"].dropna()
            if seeds.empty:
                raise
            return registry.resolve({**coords, "seed": int(seeds.min())})
    try:
        return registry.resolve({**coords, "seed": int(seed)})
    except UnknownCheckpointError:
        cid = registry.resolve(coords)
        if registry.get(cid).seed is not None:
            raise
        return cid


def _store_point(registry: Registry, pair: _Pair, lam: float, t: Any) -> str:
    """Store theta(lambda) as a merged checkpoint whose lineage names both inputs."""
    coords = {"paradigm": t.paradigm, "domain": pair.domain, "period": f"{pair.periods[1]}@lambda={lam:g}",
              "variant": t.variant}
    params = {"method": "temporal", "lam": lam, "equation": "MMGRid Eq. 10"}
    parents = [(pair.p1, "merge_input"), (pair.p2, "merge_input")]
    cid = registry.make_id(coords, "merged", parents, params, None, None)
    if registry.has(cid):
        return cid
    ck2 = pair.ck2
    state = interpolate_state(pair.theta1, ck2.state, lam)
    meta = {**ck2.meta, "added_rows": {k: [v[0], list(v[1])] for k, v in ck2.added_rows.items()}}
    return registry.put(state, coords, "merged", parents=parents, params=params, files=ck2.files, meta=meta)


def sweep_domain_job(grid: dict[str, Any], domain: str, seed: int | None = None,
                     lambdas: list[float] | None = None) -> list[dict[str, Any]]:
    """Executor entry point (JSON in, JSON out): one domain's sweep (one seed's replicate; ``lambdas``
    instead of the configured grid, e.g. an extension past an edge) in a worker process."""
    cfg = grid_from_dict(grid)
    reg = Registry.open(cfg.registry_root, index=False)
    return sweep_domain(cfg, reg, load_prepared(cfg.prepared_dir), DomainSweep(domain, lambdas, seed))


def run_cells(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", cells: list[tuple[int, str]],
              executor: "Executor | None" = None, evaluator_factory: EvaluatorFactory | None = None,
              lambdas: dict[str, list[float]] | None = None, desc: str = "temporal sweep") -> list[dict[str, Any]]:
    """Sweep every (seed, domain) cell, here in order or as one executor job each; rows in cell order.

    ``lambdas``: per domain, the points to evaluate instead of the configured grid. With an executor the
    driver indexes what the jobs recorded (``registry.sync()``) before returning; the rows and records
    do not depend on where the jobs ran."""
    rows: list[dict[str, Any]] = []
    lams = lambdas or {}
    if executor is None or evaluator_factory is not None:
        for seed, d in _progress(cells, desc):
            rows += sweep_domain(cfg, registry, prepared, DomainSweep(d, lams.get(d), seed), evaluator_factory)
        return rows
    grid = cfg.to_dict()
    futs = [executor.submit(Job("mmgrid.sweep.temporal:sweep_domain_job",
                                {"grid": grid, "domain": d, "seed": seed, "lambdas": lams.get(d)},
                                name=f"temporal:{d}:seed={seed}")) for seed, d in cells]
    return [row for got in gather(futs, registry, desc, unit="domain") for row in got]


def run_temporal(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", executor: "Executor | None" = None,
                 evaluator_factory: EvaluatorFactory | None = None) -> pd.DataFrame:
    """Run the temporal sweep on every configured domain (``sweeps.temporal.domains`` or all) and
    every training seed's replicate (``train.seeds``).

    Args:
        cfg: the grid.
        registry: an open registry.
        prepared: the prepared dataset.
        executor: run one job a domain on it (e.g. Ray); None runs here, in order.
        evaluator_factory: override the evaluator (tests).

    Returns:
        Long results, columns :data:`COLUMNS`.
    """
    domains = list(cfg.sweeps.temporal.domains or prepared.domains)
    unknown = [d for d in domains if d not in prepared.domains]
    if unknown:
        raise ConfigError(f"sweeps.temporal.domains: {unknown} not in the prepared dataset ({prepared.domains}).")
    cells = [(seed, d) for seed in cfg.train.seed_list for d in domains]
    rows = run_cells(cfg, registry, prepared, cells, executor, evaluator_factory)
    return pd.DataFrame(rows, columns=COLUMNS)


def _progress(items: list, desc: str) -> Any:
    return progress_bar(items, desc=desc, unit="domain", leave=True)


def temporal_results(registry: Registry, paradigm: str | None = None, variant: str | None = None,
                     study: str = STUDY, seed: "int | str | None" = None) -> pd.DataFrame:
    """The temporal study's evaluations as stored in the registry, long format (:data:`COLUMNS`).

    Re-recorded points (a sweep run twice) keep the newest value. ``study="lambda_hat"``
    reads the evaluations at the predicted lambda_hat* instead.

    ``seed``: the training seed's replicate to read; None (default) the lowest seed recorded
    (the first seed of the demo's grid, 0); ``"all"`` every replicate (one row per seed).
    """
    df = study_frame(registry, study, paradigm=paradigm, variant=variant)
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    if "seed" not in df.columns:
        df["seed"] = None
    df["seed"] = pd.to_numeric(df["seed"], errors="coerce")
    if seed != "all" and df["seed"].notna().any():
        want = df["seed"].min() if seed is None else int(seed)
        df = df[df["seed"] == want].copy()
    rec = df["recipe"].map(_inputs)
    df["p1_id"] = rec.map(lambda r: r[0])
    df["p2_id"] = rec.map(lambda r: r[1])
    df["lambda"] = df["lambda"].astype(float).round(9)
    df["study"] = study
    keys = ["paradigm", "variant", "domain", "group", "lambda", "metric"] + (["seed"] if seed == "all" else [])
    if study != STUDY:  # one evaluation per domain: the newest lambda_hat* wins
        df = df.drop_duplicates(["paradigm", "variant", "domain", "group", "metric", "seed"], keep="last")
    df = df.drop_duplicates(keys, keep="last")
    return df[COLUMNS].sort_values(keys).reset_index(drop=True)


def _inputs(recipe_json: Any) -> tuple[str | None, str | None]:
    try:
        r = json.loads(recipe_json) if isinstance(recipe_json, str) else dict(recipe_json or {})
        ins = r.get("inputs") or [None, None]
        return ins[0], ins[1]
    except (ValueError, TypeError, MmgridError):
        return None, None
