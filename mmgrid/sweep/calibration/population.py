"""The population values of the grid's own world, cached beside it (``<data.root>/population.json``).

A finding's *population value* for a world configuration is what the grid's pipeline finds with a test
population far larger than the run's (``sweeps.calibrate.population_user_scale`` times the users, every
test user evaluated) on ``sweeps.calibrate.population_worlds`` worlds of the same configuration (world
seeds ``world_seed + 10000 + p``) and the grid's training seeds (:func:`mmgrid.sweep.calibration.measures.
population_values`). It is a value of the configuration, over world seeds, not of one world's realization.
The sidecar maps a key (the population runs' recipe hashes: the world's knobs and the grid's budget) to the
values, so a changed world or budget is computed anew and an unchanged one is read back. The report shows it
as "the world's own value" (:func:`read_world_population`).

The population values of the packaged demo world at the demo's budget ship with mmgrid
(:data:`KNOWN`, ``known_populations.json``: the size-1 population runs of the calibration study recorded
in ``bench/results/calibration.md``, whose recipes equal the demo's own population runs), so the demo's
report shows them without computing anything. The table is keyed like the sidecar: any other world,
budget or replicate version misses it and falls back to the sidecar or to nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmgrid.config import GridConfig
from mmgrid.configtools import stable_hash
from mmgrid.fileio.atomic import atomic_write
from mmgrid.exec.args import executor_from_config, job_resources
from mmgrid.exec.base import Job
from mmgrid.runtime.gather import gather
from mmgrid.sweep.calibration.measures import population_values
from mmgrid.sweep.calibration.replicate import REPLICATE_JOB, VERSION, json_safe, recipe_hash, replicate_grid

SIDECAR = "population.json"
KNOWN = Path(__file__).resolve().parent / "known_populations.json"  # key -> values, measured once (see above)


def _jobs(cfg: GridConfig) -> tuple[str, list[Job]]:
    c = cfg.sweeps.calibrate
    base = Path(cfg.data.root).resolve().parent / "population-runs"
    jobs, hashes = [], []
    for p in range(c.population_worlds):
        seed = c.world_seed + 10_000 + p
        h = recipe_hash(replicate_grid(cfg, None, seed, base / "pending", population=True))
        g = replicate_grid(cfg, None, seed, base / h, population=True)
        hashes.append(h)
        jobs.append(Job(REPLICATE_JOB, {"grid": g, "result_path": str(base / f"{h}.json"), "keep_runs": False},
                        resources=job_resources(cfg.exec, "train"), name=f"population:world={seed}"))
    return stable_hash({"population": hashes, "version": VERSION}), jobs


def population_key(cfg: GridConfig) -> str:
    """The sidecar key of the grid's world and budget."""
    return _jobs(cfg)[0]


def _read_table(path: Path) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def read_world_population(cfg: GridConfig) -> dict[str, Any] | None:
    """The population values of the grid's world and budget: the world's sidecar, else the values that ship
    with mmgrid for that key (:data:`KNOWN`), else None (not computed yet, or stale)."""
    key = population_key(cfg)
    got = _read_table(Path(cfg.data.root) / SIDECAR).get(key)
    return got if got is not None else _read_table(KNOWN).get(key)


def known_entry(cfg: GridConfig, population_json: str | Path) -> tuple[str, dict[str, Any]]:
    """The :data:`KNOWN` entry for ``cfg``'s world from a calibrate run's ``population/<size>/population.json``
    whose population runs are the grid's own (checked: the same recipes), as ``(key, values)``."""
    data = json.loads(Path(population_json).read_text())
    key, jobs = _jobs(cfg)
    want = [Path(j.kwargs["result_path"]).stem for j in jobs]
    if data.get("recipes") not in (None, want):
        raise ValueError(f"{population_json}: its population runs {data['recipes']} are not this grid's {want}")
    values = {**data["values"], "user_scale": data["world_user_scale"], "worlds": data["worlds"],
              "seeds": cfg.train.seed_list}
    return key, json_safe(values)


def world_population(cfg: GridConfig, executor: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute (or read back) the population values of the grid's own world; write the sidecar."""
    key, jobs = _jobs(cfg)
    got = read_world_population(cfg)
    if got is not None:
        return got
    own = executor is None
    ex = executor if executor is not None else executor_from_config(cfg)
    try:
        runs = gather([ex.submit(j) for j in jobs], None, "population", unit="world", enabled=progress)
    finally:
        if own:
            ex.shutdown()
    values = json_safe({**population_values(runs), "user_scale": cfg.sweeps.calibrate.population_user_scale,
                     "worlds": cfg.sweeps.calibrate.population_worlds, "seeds": cfg.train.seed_list})
    path = Path(cfg.data.root) / SIDECAR
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    cache[key] = values
    atomic_write(path, json.dumps(cache, indent=1).encode(), durable=False)
    return values
