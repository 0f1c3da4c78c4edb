"""One replicate of the calibration study: its grid, its recipe hash, its run and the findings' estimates.

A replicate is the grid's own pipeline (world -> prepare -> build the swept paradigm -> evaluate -> temporal
sweep) on one world (seed, planted size) at the grid's budget; :func:`estimates` judges it with the report's
own statistics (:mod:`mmgrid.sweep.evidence`, :mod:`mmgrid.stats`). :func:`replicate_job` is the executor's
entry point and caches the result (JSON) under the study's folder by the replicate's recipe hash.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmgrid.config import GridConfig, grid_from_dict
from mmgrid.config.data import PlantConfig
from mmgrid.configtools import check_ranges, stable_hash
from mmgrid.errors import ConfigError
from mmgrid.fileio.atomic import atomic_write

if TYPE_CHECKING:
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry

VERSION = 3  # in every replicate's recipe: a change of what a replicate computes changes its hash
REPLICATE_JOB = "mmgrid.sweep.calibration.replicate:replicate_job"

# --------------------------------------------------------------------------- replicate configs


def replicate_grid(cfg: GridConfig, size: float | None, world_seed: int, root: Path, population: bool = False,
                   own_world: bool = False) -> dict:
    """The grid (as a dict) of one replicate: the grid's budget, only what the findings need (the swept
    paradigm, the default variant, no retention), the world's knobs at ``size`` (None: the grid's own
    ``world.plant``), folders under ``root``.

    A population replicate has ``population_user_scale`` times the users and evaluates every test user; with
    ``own_world`` those users extend the replicate's own world (``world.extend_users``: the same items, trends and
    users, plus more users), so its value is that world's, not the configuration's."""
    if cfg.world is None:
        raise ConfigError("mmgrid calibrate: the grid has no `world:` section; calibration needs the synthetic "
                          "world (e.g. grids/demo.yaml).")
    c = cfg.sweeps.calibrate
    g = copy.deepcopy(cfg.to_dict())
    t = cfg.sweeps.temporal
    g["world"]["seed"] = int(world_seed)
    if size is not None:
        g["world"]["plant"] = {**g["world"].get("plant", {}), **planted_knobs(cfg, size)}
    if population:
        g["world"]["user_scale"] = float(g["world"].get("user_scale", 1.0)) * c.population_user_scale
        g["eval"]["max_users"] = None
        g["world"]["extend_users"] = bool(own_world)
    g["paradigms"] = list(dict.fromkeys([t.paradigm, *(c.t2_paradigms or [])]))
    g["variants"] = [v for v in g["variants"] if v["name"] == t.variant] or [{"name": t.variant}]
    g["eval"]["retention"] = False
    g["eval"]["matrix_paradigms"] = []
    g["eval"]["groups"] = ["all", "active", "non_active"]
    g["exec"] = {**g["exec"], "executor": "local", "workers": 1}  # one replicate = one job, run in its process
    g["data"]["root"] = str(root / "world")
    g["prepared"] = str(root / "prepared")
    g["registry"] = str(root / "registry")
    return g


def planted_knobs(cfg: GridConfig, size: float) -> dict[str, float]:
    """The calibrated knobs of ``sweeps.calibrate.knobs`` at planted ``size``, relative to the grid's own
    ``world.plant``: each knob is ``size`` times the grid's value, so size 0 is the null world of every
    calibrated finding and size 1 is the grid's own world whatever its knobs are (with every knob at 1, as in
    the preset worlds, the size is the knob's value itself). Raises ConfigError when a product leaves the
    knob's range, before anything runs."""
    c = cfg.sweeps.calibrate
    assert cfg.world is not None  # `mmgrid calibrate` refuses a grid without a world: section
    out = {k: float(size) * float(getattr(cfg.world.plant, k)) for k in c.knobs}
    try:
        check_ranges(PlantConfig(**{**cfg.world.plant.__dict__, **out}), "world.plant")
    except ConfigError as e:
        raise ConfigError(f"sweeps.calibrate.sizes: size {size:g} times the grid's world.plant leaves a knob's "
                          f"range ({e}); planted sizes multiply the grid's own knobs (docs/calibration.md), "
                          "so give smaller sizes or drop that knob from sweeps.calibrate.knobs.") from e
    return out


def recipe_hash(grid: dict, sweep: bool = True) -> str:
    """The replicate's identity: its grid without folders and execution settings, and :data:`VERSION`; a run
    without the temporal sweep (``sweep=False``: the Table 2 finding only) is another recipe."""
    g = copy.deepcopy(grid)
    g["data"].pop("root", None)
    if not g.get("world", {}).get("extend_users", True):
        g["world"].pop("extend_users")  # the default (a fresh world) keeps the recipes from before the key existed
    for k in ("prepared", "registry", "exec", "name"):
        g.pop(k, None)
    g["sweeps"].pop("calibrate", None)  # the study's own settings do not change what one replicate computes
    g["sweeps"].pop("cross_domain", None)
    key = {"calibrate_replicate": g, "version": VERSION}
    return stable_hash(key if sweep else {**key, "steps": "table2"})


# --------------------------------------------------------------------------- one replicate


def run_replicate(grid: dict, sweep: bool = True) -> dict[str, Any]:
    """world -> prepare -> build -> evaluate -> temporal sweep (``sweep``) -> the findings' estimates (JSON-able)."""
    # lazy: the pipeline (torch ~3.5 s, transformers) is only needed where a replicate runs (a worker)
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.eval.grid import evaluate_grid
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.plan import plan_grid
    from mmgrid.runtime.progress import is_quiet, set_quiet
    from mmgrid.sweep.temporal import run_temporal
    from mmgrid.train.build import build_grid

    t0 = time.perf_counter()
    cfg = grid_from_dict(grid, where="calibrate replicate")
    assert cfg.world is not None
    was = is_quiet()
    set_quiet(True)  # the study prints one line per replicate; the pipeline's own bars would bury it
    try:
        write_world(cfg.data.root, cfg.world)
        prepared = prepare(cfg, log=lambda m: None)
        build_grid(cfg, progress=False)
        reg = Registry.open(cfg.registry_root)
        evaluate_grid(cfg, plan_grid(cfg, reg, prepared), progress=False, registry=reg, prepared=prepared)
        if sweep:
            run_temporal(cfg, reg, prepared)
        out = estimates(cfg, reg, prepared, sweep)
    finally:
        set_quiet(was if was else None)
    out["seconds"] = time.perf_counter() - t0
    return out


def estimates(cfg: GridConfig, reg: Registry, prepared: PreparedDataset, sweep: bool = True) -> dict[str, Any]:
    """The findings' estimates and intervals of one run, as the report computes them (without ``sweep``: the
    Table 2 difference only)."""
    # lazy: pandas-heavy evidence readers, only where a replicate runs
    from mmgrid.sweep import evidence as ev
    from mmgrid.sweep.lambda_model import stats_table

    t = cfg.sweeps.temporal
    level = cfg.sweeps.calibrate.level
    domains = sorted(str(d) for d in prepared.domains)
    st = stats_table(prepared).set_index("domain")
    out: dict[str, Any] = {"domains": domains, "avg_gap": {d: float(st.loc[d, "avg_gap_days"]) for d in domains},
                           "lambda_star": {}, "curves": {}}
    if sweep:
        _lambda_estimates(out, ev.temporal_curves(reg, t.paradigm, t.variant, t.metric), t.smooth, level)
    _t2_estimates(out, cfg, reg)
    return out


def _lambda_estimates(out: dict[str, Any], curves: Any, smooth: Any, level: float) -> None:
    """lambda* per domain and group, the curves, rho (Table 4) and "lambda = 1 is not the best" (Figure 5)."""
    # lazy: as estimates()
    from mmgrid.stats import spearman_with_interval
    from mmgrid.sweep import evidence as ev

    domains = out["domains"]
    stars = ev.robust_stars(curves, smooth)
    for r in stars.itertuples():
        out["lambda_star"].setdefault(r.domain, {})[r.group] = [r.lambda_star, r.ci_low, r.ci_high, r.n_users]
    for (d, g), c in curves.items():
        out["curves"].setdefault(d, {})[g] = {"lambdas": [float(x) for x in c.lambdas],
                                              "mean": [float(x) for x in c.values.mean(axis=(0, 2))],
                                              "n_users": int(c.values.shape[2])}
    na = [out["lambda_star"].get(d, {}).get("non_active") for d in domains]
    if all(na) and len(domains) >= 3:
        reps = ev.star_replicates(curves, domains, "non_active", smooth)
        sp = spearman_with_interval([out["avg_gap"][d] for d in domains], [x[0] for x in na], reps, level)
        out["t4_rho"] = [sp.rho, sp.ci_low, sp.ci_high, sp.pvalue]
    al = [(d, out["lambda_star"].get(d, {}).get("all")) for d in domains]
    al = [(d, x) for d, x in al if x]
    if al:
        # as the report judges it: each domain's interval at the family level (Bonferroni over the domains)
        fw = {r.domain: (r.fw_low, r.fw_high) for r in stars.itertuples() if r.group == "all"}
        off = [d for d, _ in al if fw[d][0] > 1.0 or fw[d][1] < 1.0]
        out["f5_not1"] = {"holds": bool(off), "max_dev": max(abs(x[0] - 1.0) for _, x in al), "domains": off}


def _t2_estimates(out: dict[str, Any], cfg: GridConfig, reg: Registry) -> None:
    """Each paradigm - most-popular (Table 2), users of every domain pooled, and the spread for the planner."""
    # lazy: as estimates()
    from mmgrid.eval.table import CheckpointValues
    from mmgrid.sweep import evidence as ev

    t, domains = cfg.sweeps.temporal, out["domains"]
    t2 = list(dict.fromkeys([t.paradigm, *(cfg.sweeps.calibrate.t2_paradigms or [])]))
    cv = CheckpointValues(reg, cfg.eval.split, cfg.train.stages[-1], [*t2, "popular"], t.variant)
    out["t2_each"] = {}
    for par in t2:  # each paradigm - most-popular, users of every domain pooled (the report's Table 2 finding)
        pp = ev.pooled_pair(cv, par, "popular", domains, "ndcg@10")
        if pp is not None:
            out["t2_each"][par] = [pp["diff"], pp["ci_low"], pp["ci_high"], pp["p"], pp["n_users"], pp["n_seeds"]]
    if t.paradigm in out["t2_each"]:
        out["t2_popular"] = out["t2_each"][t.paradigm]
        sd = _difference_spread(cv, t.paradigm, domains)
        if sd is not None:
            out["t2_sd_user"], out["t2_sd_seed"] = sd


def _difference_spread(cv: Any, paradigm: str, domains: list[str]) -> tuple[float, float] | None:
    """(SD over users of the seed-averaged paired difference, SD over seeds of the mean difference): the inputs
    of the design planner (:func:`mmgrid.stats.power.plan_design`)."""
    # lazy: as estimates()
    from mmgrid.eval.table import align

    per_user, per_seed = [], []
    for d in domains:
        a, b = cv.values(paradigm, d, "ndcg@10"), cv.values("popular", d, "ndcg@10")
        if a is None or b is None:
            continue
        ia, ib = align(a[0], b[0])
        diff = a[1][:, ia] - b[1][:, ib]
        per_user.append(diff.mean(axis=0))
        per_seed.append(diff)
    if not per_user:
        return None
    u = np.concatenate(per_user)
    s = np.concatenate(per_seed, axis=1).mean(axis=1)
    return float(u.std(ddof=1)) if u.size > 1 else float("nan"), float(s.std(ddof=1)) if s.size > 1 else float("nan")


def replicate_job(grid: dict, result_path: str, keep_runs: bool = False, sweep: bool = True) -> dict[str, Any]:
    """Executor entry point (JSON in, JSON out): one replicate, its result written to ``result_path`` (cache)."""
    path = Path(result_path)
    if path.exists():
        return json.loads(path.read_text())
    root = Path(grid["registry"]).parent
    try:
        out = run_replicate(grid, sweep)
    finally:
        if not keep_runs:
            shutil.rmtree(root, ignore_errors=True)
    # a finished result or none: an interrupted study leaves no half result
    atomic_write(path, json.dumps(json_safe(out), indent=1).encode(), durable=False)
    return out


def json_safe(x: Any) -> Any:
    """``x`` with NaN/inf floats as None and numpy scalars as Python numbers, ready for ``json.dumps``."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return json_safe(x.item())
    return x


def as_float(v: Any) -> float:
    """``v`` as a float, None as NaN (the inverse of :func:`json_safe` for one number)."""
    return float("nan") if v is None else float(v)

