"""The calibration study (``mmgrid calibrate``): can the instrument see what the world plants?

A simulation study in the ADEMP structure of Morris, White & Crowther (Stat Med 2019):

* **Aims**: for each finding the report judges, the rate of "holds" when the world plants no effect
  (type-I error) and when it plants one (power), the coverage of the finding's population value by the
  95% intervals, the bias, and the minimum detectable effect at 80% power, at the grid's budget.
* **Data-generating mechanism**: the synthetic world with its planted mechanisms
  (``world.plant``, :func:`mmgrid.data.world_files.planted_knobs`) set to a *size*: every knob of
  ``sweeps.calibrate.knobs`` equals the size (0: the null world, 1: the preset's world). Replicate r of
  a size has world seed ``sweeps.calibrate.world_seed + r`` and the grid's training seeds.
* **Estimands** (:data:`mmgrid.sweep.calibration.measures.FINDINGS`): the non-active users' lambda* of each domain (argmax of the expected
  NDCG@10 curve); Spearman's rho between the domains' average interaction time gap and that lambda*
  (MMGRid Table 4); the largest |lambda* - 1| over domains, all users (Figure 5: "lambda = 1 is not the
  best"); the pooled paired NDCG@10 difference of the swept paradigm and most-popular (Table 2). Their
  **population values** come from the same pipeline on ``population_worlds`` worlds with
  ``population_user_scale`` times the users (more test users from the same process) and the grid's
  seeds: the curves averaged over those worlds, their argmax, rho of the averaged gaps with it, the
  users-weighted mean difference (:func:`population_values`).
* **Methods**: the grid's own pipeline (world -> prepare -> build the swept paradigm -> evaluate ->
  temporal sweep) and the report's own statistics (:mod:`mmgrid.sweep.evidence`, :mod:`mmgrid.stats`).
* **Performance measures** with Monte Carlo standard errors (:mod:`mmgrid.stats.power`).

Each replicate is one executor job (:func:`replicate_job`), cached by its recipe: a replicate whose recipe
hash already has a result under ``OUT/replicates/`` is not run again. The population values are cached
beside them (``OUT/population/<size>/population.json``, keyed by the population worlds' recipes).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmgrid.config import GridConfig
from mmgrid.exec.args import executor_from_config, job_resources
from mmgrid.exec.base import Job, LocalExecutor
from mmgrid.runtime.gather import gather
from mmgrid.sweep.calibration.measures import (FindingCalibration, all_users_intervals, calibrate_finding,
                                               population_values, some_pair_disjoint)
from mmgrid.sweep.calibration.replicate import REPLICATE_JOB, as_float, json_safe, recipe_hash, replicate_grid

# --------------------------------------------------------------------------- the study


@dataclass
class CalibrationResult:
    """What ``mmgrid calibrate`` measured (typed, for the report): per finding and size, and the population values."""

    out: Path
    sizes: list[float]
    knobs: list[str]
    replicates: int
    population: dict[float, dict[str, Any]]
    findings: list[FindingCalibration]
    seconds_per_replicate: float
    runs: dict[float, list[dict[str, Any]]] = field(default_factory=dict)
    grid_world: dict[str, Any] | None = None  # the grid's own world through the replicate pipeline (grid_world)
    seconds: float = math.nan  # the study's wall time here (cached replicates count 0)

    def table(self) -> list[dict[str, Any]]:
        rows = []
        for f in self.findings:
            rows.append({"finding": f.finding, "size": f.size, "population": f.population, "null": f.is_null,
                         "holds": f.holds.text() if f.holds else "-", "coverage": f.coverage.text() if f.coverage else "-",
                         "bias": f"{f.bias.bias:+.3f} (MCSE {f.bias.mcse:.3f})" if f.bias and math.isfinite(f.bias.bias)
                         else "-", "mde_80": f.mde, "n": f.n})
        return rows


def _size_key(size: float) -> str:
    return f"{float(size):g}"


def run_calibration(cfg: GridConfig, out_dir: str | Path, executor: Any = None, progress: bool = True
                    ) -> CalibrationResult:
    """Run (or read back from the cache) every replicate and population run; write the record
    ``OUT/calibration.json`` (:func:`write_record`). ``OUT/calibration.md`` and ``OUT/power_curve.png`` are its
    rendering (:func:`mmgrid.render.calibration.write_calibration`, which ``mmgrid calibrate`` calls).

    Args:
        cfg: the grid (``sweeps.calibrate`` and the grid's budget).
        out_dir: the study's folder (replicate results are cached under it by recipe).
        executor: runs one job per replicate (default: the grid's ``exec:`` section).
        progress: progress bars and a line per replicate.
    """
    c = cfg.sweeps.calibrate
    out = Path(out_dir)
    jobs: list[tuple[str, float, Job]] = []
    own_world = uses_own_world(cfg)
    n_own = own_world_count(cfg)
    for size in c.sizes:
        for p in range(c.population_worlds):
            seed = c.world_seed + 10_000 + p  # population worlds never share a seed with a replicate
            jobs.append(("population", size, calibrate_job(cfg, size, seed, out, population=True)))
        for r in range(c.replicates):
            jobs.append(("replicate", size, calibrate_job(cfg, size, c.world_seed + r, out)))
            if own_world and r < n_own:  # this replicate's own world, more of its users (Table 2's, lambda*'s value)
                jobs.append(("own world", size, calibrate_job(cfg, size, c.world_seed + r, out, population=True,
                                                              own_world=True)))
    grid_path = None  # the grid's own world's result (one of the replicates' when its seed and knobs are theirs)
    if c.grid_world:
        assert cfg.world is not None  # `mmgrid calibrate` refuses a grid without a world: section
        gj = calibrate_job(cfg, None, cfg.world.seed, out)
        grid_path = gj.kwargs["result_path"]
        if all(j.kwargs["result_path"] != grid_path for _, _, j in jobs):
            jobs.append(("grid world", float("nan"), gj))
    out.mkdir(parents=True, exist_ok=True)  # every job built (a bad planted size is named) before anything is written
    own = executor is None
    ex = executor if executor is not None else executor_from_config(cfg)
    cached = sum(Path(j.kwargs["result_path"]).exists() for _, _, j in jobs)
    if progress:
        grid = (" + the grid's own world" if any(k == "grid world" for k, _, _ in jobs)
                else " (the grid's own world is one of them)" if c.grid_world else "")
        print(f"calibrate: {len(jobs)} runs ({len(c.sizes)} size(s) x ({c.replicates} replicate(s)"
              f"{f' + {n_own} own-world population(s)' if own_world else ''} + {c.population_worlds} population "
              f"world(s)){grid}), {cached} cached under {out / 'replicates'}", flush=True)
    t0 = time.perf_counter()

    def line(i: int, res: dict[str, Any]) -> None:
        if progress:
            kind, size, _ = jobs[i]
            el = time.perf_counter() - t0
            what = kind if kind == "grid world" else f"{kind} size {size:g}"
            print(f"   {what} [{i + 1}/{len(jobs)}]: {res.get('seconds', 0.0):.0f} s "
                  f"(elapsed {el:.0f} s, ETA {el / (i + 1) * (len(jobs) - i - 1):.0f} s)", flush=True)

    try:
        if isinstance(ex, LocalExecutor):  # runs each job at submit: report as each one finishes
            results = []
            for i, (_, _, j) in enumerate(jobs):
                results.append(ex.submit(j).result())
                line(i, results[-1])
        else:
            results = gather([ex.submit(j) for _, _, j in jobs], None, "calibrate", unit="run", enabled=progress,
                             on_result=line)
    finally:
        if own:
            ex.shutdown()
    pops: dict[float, dict[str, Any]] = {}
    runs: dict[float, list[dict[str, Any]]] = {}
    owns: dict[float, list[dict[str, Any] | None]] = {}
    grid_world = next((res for (_, _, j), res in zip(jobs, results) if j.kwargs["result_path"] == grid_path), None)
    for (kind, size, _), res in zip(jobs, results):
        if kind == "grid world":
            continue
        (runs.setdefault(size, []) if kind == "replicate" else owns.setdefault(size, []) if kind == "own world"
         else pops.setdefault(size, {}).setdefault("_runs", [])).append(res)
    for size, rs in runs.items():  # own-world runs belong to the first n_own replicates: the rest have none
        if size in owns:
            owns[size] = owns[size] + [None] * (len(rs) - len(owns[size]))
    population = {}
    for size in c.sizes:
        pop = population_values(pops.get(size, {}).get("_runs", []))
        population[size] = pop
        ppath = out / "population" / _size_key(size) / "population.json"
        ppath.parent.mkdir(parents=True, exist_ok=True)
        recipes = [Path(j.kwargs["result_path"]).stem for kind, sz, j in jobs if kind == "population" and sz == size]
        ppath.write_text(json.dumps(json_safe({"size": size, "knobs": c.knobs, "world_user_scale": c.population_user_scale,
                                            "worlds": c.population_worlds, "recipes": recipes, "values": pop}),
                                    indent=1))
    own_for = {f for f, on in (("t2_popular", own_world_t2(cfg)), ("lambda_star", own_world_sweeps(cfg))) if on}
    found = [calibrate_finding(f, size, runs.get(size, []), population[size], c.level, c.power, c.knobs,
                               owns.get(size) if f in own_for else None)
             for f in c.findings for size in c.sizes]
    secs = [float(r["seconds"]) for rs in runs.values() for r in rs if r.get("seconds")]
    res = CalibrationResult(out, list(c.sizes), list(c.knobs), c.replicates, population, found,
                            float(np.mean(secs)) if secs else float("nan"), runs, grid_world,
                            time.perf_counter() - t0)
    write_record(res, cfg)
    return res


def uses_own_world(cfg: GridConfig) -> bool:
    """Whether the study runs each replicate's own world (more of its users): for the Table 2 difference's or
    the lambda* target (``t2_population`` / ``lambda_population`` "world")."""
    return own_world_t2(cfg) or own_world_sweeps(cfg)


def own_world_t2(cfg: GridConfig) -> bool:
    """Whether the Table 2 difference is measured against each replicate's own world."""
    c = cfg.sweeps.calibrate
    return "t2_popular" in c.findings and c.t2_population == "world"


def own_world_sweeps(cfg: GridConfig) -> bool:
    """Whether the own-world runs also run the temporal sweep (lambda*'s own-world value)."""
    c = cfg.sweeps.calibrate
    return "lambda_star" in c.findings and c.lambda_population == "world"


def own_world_count(cfg: GridConfig) -> int:
    """How many replicates of each size get an own-world run (the first ones; ``own_world_replicates``)."""
    c = cfg.sweeps.calibrate
    if not uses_own_world(cfg):
        return 0
    return c.replicates if c.own_world_replicates is None else min(c.own_world_replicates, c.replicates)


def calibrate_job(cfg: GridConfig, size: float | None, world_seed: int, out: Path, population: bool = False,
         own_world: bool = False) -> Job:
    """A replicate, a population world, or (``own_world``) a replicate's own world with more users (with the
    temporal sweep only where lambda*'s target is the own world, :func:`own_world_sweeps`); ``size`` None: the
    grid's own ``world.plant``."""
    kind = "own-world" if own_world else "population" if population else "replicate"
    sweep = not own_world or own_world_sweeps(cfg)
    g = replicate_grid(cfg, size, world_seed, out / "runs" / "pending", population, own_world)
    h = recipe_hash(g, sweep=sweep)
    g = replicate_grid(cfg, size, world_seed, out / "runs" / h, population, own_world)
    kw = {"grid": g, "result_path": str(out / "replicates" / f"{h}.json"), "keep_runs": cfg.sweeps.calibrate.keep_runs}
    if not sweep:
        kw["sweep"] = False
    return Job(REPLICATE_JOB, kw,
               resources=job_resources(cfg.exec, "train"),  # a replicate trains: a training job's resources on Ray
               name=f"calibrate:{kind}:size={'grid' if size is None else format(size, 'g')}:world={world_seed}")


# --------------------------------------------------------------------------- the study's record


def write_record(res: CalibrationResult, cfg: GridConfig) -> Path:
    """``OUT/calibration.json``: what the study measured (:func:`grid_identity`), per finding and size, the
    population values and the grid's own world (:func:`grid_world_summary`); the report reads it
    (:mod:`mmgrid.render.report_calibration`)."""
    path = res.out / "calibration.json"
    path.write_text(json.dumps(json_safe({
        "grid": grid_identity(cfg, res.out),
        "sizes": res.sizes, "knobs": res.knobs, "replicates": res.replicates,
        "population": {_size_key(k): v for k, v in res.population.items()},
        "findings": [f.to_dict() for f in res.findings], "seconds_per_replicate": res.seconds_per_replicate,
        "grid_world": grid_world_summary(res, cfg),
        "t2_sd": _t2_spread(res),
    }), indent=1))
    return path



def grid_identity(cfg: GridConfig, out: Path) -> dict[str, Any]:
    """What the study measured: the grid's name, the recipe of its own world at its budget (the replicate
    recipe at the grid's own ``world.plant``, world seed ``world_seed``) and, per planted size, the recipe
    of every replicate and population run (``OUT/replicates/<recipe>.json``). Two calibration.json files with
    equal identities measured the same thing; a changed world, budget or replicate version shows here."""
    c = cfg.sweeps.calibrate
    own = recipe_hash(replicate_grid(cfg, None, c.world_seed, out / "runs" / "pending"))

    def recipe(size: float, seed: int, population: bool) -> str:
        return Path(calibrate_job(cfg, size, seed, out, population).kwargs["result_path"]).stem

    def own_world(size: float, seed: int) -> str:
        return Path(calibrate_job(cfg, size, seed, out, True, True).kwargs["result_path"]).stem

    grid = Path(calibrate_job(cfg, None, cfg.world.seed, out).kwargs["result_path"]).stem if cfg.world is not None else None
    return {"name": cfg.name, "recipe": own, "world_seed": c.world_seed, **({"grid_world": grid} if c.grid_world else {}),
            "runs": {_size_key(size): {
                "replicates": [recipe(size, c.world_seed + r, False) for r in range(c.replicates)],
                "population": [recipe(size, c.world_seed + 10_000 + p, True) for p in range(c.population_worlds)],
                **({"own_world": [own_world(size, c.world_seed + r) for r in range(own_world_count(cfg))]}
                   if uses_own_world(cfg) else {})}
                for size in c.sizes}}



def _grid_size(res: CalibrationResult) -> float | None:
    """The planted size equal to the grid's own world: 1 (sizes multiply the grid's own knobs), if the study
    has it."""
    return next((s for s in res.sizes if float(s) == 1.0), None)


def _rank(v: float, xs: list[float]) -> str:
    """Where ``v`` falls among ``xs``: "k of n below, m equal"."""
    below, equal = sum(x < v - 1e-9 for x in xs), sum(abs(x - v) <= 1e-9 for x in xs)
    return f"{below} below, {equal} equal, {len(xs) - below - equal} above"


def grid_world_summary(res: CalibrationResult, cfg: GridConfig) -> dict[str, Any] | None:
    """The grid's own world's estimates and, where the study has its planted size, their ranks among the
    replicates' (per domain for the non-active lambda*; rho's point estimate; the Table 2 difference)."""
    g = res.grid_world
    if not g:
        return None
    size = _grid_size(res)
    reps = res.runs.get(size, []) if size is not None else []
    # a grid world with a replicate's recipe is that replicate's result (run_calibration runs it once): rank it
    # among the others
    same = next((i for i, r in enumerate(reps) if r is g), None)
    if same is not None:
        reps = reps[:same] + reps[same + 1:]
    assert cfg.world is not None  # `mmgrid calibrate` refuses a grid without a world: section
    out: dict[str, Any] = {"world_seed": cfg.world.seed, "size": size, "replicates": len(reps),
                           "is_replicate": same, "lambda_star": {},
                           "t4_rho": g.get("t4_rho"), "f5_not1": (g.get("f5_not1") or {}).get("holds"),
                           "t2_popular": g.get("t2_popular")}
    for d, by in sorted((g.get("lambda_star") or {}).items()):
        x = by.get("non_active")
        if x is None:
            continue
        xs = [as_float(r["lambda_star"][d]["non_active"][0]) for r in reps
              if (r.get("lambda_star") or {}).get(d, {}).get("non_active")]
        out["lambda_star"][d] = {"estimate": x, "rank": _rank(as_float(x[0]), xs) if xs else None}
    if reps and g.get("t4_rho"):
        out["t4_rho_rank"] = _rank(as_float(g["t4_rho"][0]), [as_float(r["t4_rho"][0]) for r in reps if r.get("t4_rho")])
    if reps and g.get("t2_popular"):
        out["t2_rank"] = _rank(as_float(g["t2_popular"][0]),
                               [as_float(r["t2_popular"][0]) for r in reps if r.get("t2_popular")])
    out["f5_varies"] = some_pair_disjoint(all_users_intervals(g))
    return out


def _t2_spread(res: CalibrationResult) -> dict[str, float]:
    """Mean per-user and per-seed SD of the t2 difference over the largest planted size's replicates (for --plan)."""
    rs = res.runs.get(max(res.sizes), []) if res.sizes else []
    u = [r["t2_sd_user"] for r in rs if r.get("t2_sd_user") is not None]
    s = [r["t2_sd_seed"] for r in rs if r.get("t2_sd_seed") is not None]
    return {"user": float(np.mean(u)) if u else float("nan"), "seed": float(np.mean(s)) if s else float("nan")}
