"""Calibration of the rolling deployment verdicts (``mmgrid calibrate --rolling``): does "lambda chosen from
the past beats lambda = 1 over the windows" (``CLAIM_PAST``) or "the best strategy beats lambda = 1"
(``CLAIM_BEST``) hold where nothing is there to find, and how often does it hold where something is?

A simulation study in the ADEMP structure of Morris, White & Crowther (Stat Med 2019), on the verdict layer:

* **Data-generating mechanism**, a checkpoint world: checkpoints theta_k = k u (u = 0.5 ones(4)) trained period
  after period; on window j the metric's optimum is c_j = (j - 1 + size + e_j) u, e_j ~ N(0, jitter^2) a
  window's own displacement, drawn per replicate, domain and window (it does not persist). ``size`` is the
  planted drift: 0 is the world without drift (the latest checkpoint theta_{j-1} is the expected optimum of the
  window it is deployed on: lambda = 1 is best, a lambda fitted to a past window's e_j only adds error),
  size > 0 a persistent drift (the optimum runs ``size`` periods ahead of the latest checkpoint every period:
  lambda* = 1 + size + e_j on past windows). User i's value of a model w on
  window j is s_j(w) (1 + 0.2 z_i) + noise tanh(r_i . (w - c_j)), s_j(w) = 1 / (1 + |w - c_j|^2), with z_i and
  the direction r_i drawn per replicate, domain and window (a per-user response to the model whose mean over
  users is s_j: paired differences carry user-level noise, as a ranking metric's do). lambda_hat_past's period
  statistics are the domain's fixed average gap and p_active = 0.3.
* **Estimands**: the pooled paired difference to ``latest`` of ``lambda*_past`` (CLAIM_PAST) and of the
  strategy CLAIM_BEST names (the highest mean of those whose family-level interval lies above 0, else the
  highest mean), NDCG@10 over the windows and domains.
* **Methods**: the study's own code, :func:`mmgrid.sweep.rolling.evaluate_rolling` and
  :func:`~mmgrid.sweep.rolling.rolling_study`, every available strategy, its intervals, Holm and verdicts.
* **Performance measures**: the rate of "holds" (the type-I error at size 0, the power above it) with its Monte
  Carlo standard error, the minimum detectable effect at 80% power from each replicate's interval
  (:func:`mmgrid.stats.power.mde_from_interval`, at the level the verdict was judged at), the spread of the
  differences over replicates against the SE their intervals imply, and the share of inconclusive verdicts that print it.

The training pipeline is not part of this mechanism (the recommender world's calibration,
:mod:`mmgrid.sweep.calibration.study`, covers the trained findings): what is calibrated is what the rolling
study does with the checkpoints and per-user values it is given.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmgrid.errors import ConfigError
from mmgrid.stats.power import mcse_rate, mde_from_interval, se_from_interval

VERSION = 2  # in every result: a change of what a replicate computes changes it
METRIC = "ndcg@10"
STEP = 0.5  # |u| per coordinate: one period of training moves theta by 0.5 ones(4), |u|^2 = 1
PAIR_NOISE_SCALE = 0.2  # z_i's weight: users differ in level


@dataclass(frozen=True)
class RollingPlan:
    """One calibration of the rolling verdicts.

    Attributes:
        sizes: planted drifts (periods the optimum runs ahead of the latest checkpoint); 0 is the null world.
        replicates: replicate worlds per size.
        periods: incremental periods (the deployments; at least 2).
        domains: domains per world.
        users: test users per domain and window.
        noise: the per-user response's scale.
        jitter: the SD (in periods) of each window's own displacement of its optimum (not persisting).
        seed: the first replicate's seed (replicate r of every size: seed + r).
    """

    sizes: tuple[float, ...] = (0.0, 0.25, 0.5)
    replicates: int = 40
    periods: int = 4
    domains: int = 2
    users: int = 200
    noise: float = 0.1
    jitter: float = 0.25
    seed: int = 0

    def check(self) -> None:
        """Raise ConfigError naming a value out of range (before anything is written)."""
        bad: list[tuple[str, Any, str]] = [(n, v, want) for n, v, want in (
            ("replicates", self.replicates, "an integer >= 1"), ("periods", self.periods, "an integer >= 2"),
            ("domains", self.domains, "an integer >= 1"), ("users", self.users, "an integer >= 10"))
            if not isinstance(v, int) or v < {"replicates": 1, "periods": 2, "domains": 1, "users": 10}[n]]
        if not self.sizes or any(not math.isfinite(s) or not 0 <= s <= 1.5 for s in self.sizes):
            bad.append(("sizes", list(self.sizes), "drifts in [0, 1.5] (the lambda grid reaches 2.5)"))
        for n, v in (("noise", self.noise), ("jitter", self.jitter)):
            if not math.isfinite(v) or v < 0:
                bad.append((n, v, "a finite number >= 0"))
        if bad:
            raise ConfigError("mmgrid calibrate --rolling: " + "; ".join(f"{n} {v!r} must be {w}" for n, v, w in bad)
                              + ".")


# the smoke plan: 3 periods x 2 domains leave 4 (domain, window) cells where lambda*_past differs from latest;
# at the default jitter their spread hides a drift of 0.5 from an interval over 4 cells, at 0.05 it does not
SMOKE = RollingPlan(sizes=(0.0, 0.5), replicates=2, periods=3, domains=2, users=40, jitter=0.05)


class _Point(torch.nn.Module):
    """A checkpoint of the world: a point w in R^4."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w.clone())


class _Domain:
    def __init__(self, name: str) -> None:
        self.name = name


class _World:
    """The replicate's prepared-dataset stand-in: its domains by name."""

    def __init__(self, n: int) -> None:
        self.domains = [f"D{i}" for i in range(n)]

    def domain(self, name: str) -> _Domain:
        return _Domain(name)


def _phases(periods: int) -> tuple[list[str], dict[str, list[str | None]]]:
    stages = [f"p{k}" for k in range(periods + 1)]
    months = [f"{2020 + m // 12}-{m % 12 + 1:02d}-01" for m in range(0, 3 * (periods + 3), 3)]
    phases: dict[str, list[str | None]] = {"p0": [None, months[1]]}
    for k in range(1, periods + 1):
        phases[f"p{k}"] = [months[k], months[k + 1]]
    phases["test"] = [months[periods + 1], months[periods + 2]]
    return stages, phases


def _evaluator_factory(plan: RollingPlan, size: float, seed: int, index: dict[str, int]):
    from mmgrid.eval.ranking import EvalResults, PerUser  # lazy: the eval layer's result types

    u = np.full(4, STEP)

    def factory(cfg: Any, name: str, paradigm: Any, domain: Any, prepared: Any, window: str):
        j = index[window]
        d = int(domain.name[1:])
        rng = np.random.default_rng([seed, d, j, 7])
        z = rng.normal(size=plan.users)
        r = rng.normal(size=(plan.users, 4))
        c = (j - 1 + size + plan.jitter * rng.normal()) * u
        users = np.arange(plan.users)

        def evaluate(model: Any) -> Any:
            w = model.w.detach().double().numpy()
            s = 1.0 / (1.0 + float(((w - c) ** 2).sum()))
            per = s * (1.0 + PAIR_NOISE_SCALE * z) + plan.noise * np.tanh(r @ (w - c))
            m = float(per.mean())
            return EvalResults({"all": {METRIC: m, "recall@10": m, "n": plan.users}},
                               PerUser(users, np.zeros(plan.users, dtype=bool), {METRIC: per, "recall@10": per}))
        return evaluate
    return factory


def replicate(plan: RollingPlan, size: float, r: int, root: Path) -> dict[str, Any]:
    """One replicate world through the rolling study: each claim's verdict, estimate, interval and MDE."""
    # lazy: the registry, the config and the study (pandas, scipy) only when a replicate runs
    from mmgrid.config import GridConfig
    from mmgrid.configtools import build
    from mmgrid.registry import Registry
    from mmgrid.stats.verdict import INCONCLUSIVE
    from mmgrid.sweep.rolling import (CLAIM_BEST, CLAIM_PAST, RollingOptions, available, evaluate_rolling,
                                      rolling_study)

    seed = plan.seed + r
    stages, phases = _phases(plan.periods)
    index = {p: i for i, p in enumerate(phases)}
    folder = root / f"size{size:g}_r{r}"
    reg = Registry.open(folder, durable=False)
    world = _World(plan.domains)
    for d in world.domains:
        prev, role = reg.put({"w": torch.zeros(4)}, {"paradigm": "ckworld", "domain": d, "period": "base"},
                             "base"), "init"
        for k, period in enumerate(stages):
            prev = reg.put({"w": torch.full((4,), k * STEP)}, {"paradigm": "ckworld", "domain": d, "period": period},
                           "trained", parents=[(prev, role)], params={"stage": period})
            role = "previous_stage"
    cfg = build(GridConfig, {
        "name": "rolling-calibration", "registry": str(folder), "prepared": str(folder / "none"),
        "data": {"phases": phases}, "train": {"stages": stages, "epochs": {s: 1 for s in stages}},
        "eval": {"activity_phase": stages[-1], "groups": ["all"]},
        "sweeps": {"temporal": {"paradigm": "ckworld", "start": 0.0, "stop": 2.5, "step": 0.25, "metric": METRIC}}})
    gaps = {d: 10.0 + 5.0 * i for i, d in enumerate(world.domains)}
    t0 = time.perf_counter()
    evaluate_rolling(cfg, reg, world, RollingOptions(  # type: ignore[arg-type]  # the simulated world stands in for a PreparedDataset (domain(), domains)
        strategies=available(), evaluator_factory=_evaluator_factory(plan, size, seed, index), matrix=False,
        statistics=lambda prepared, data, _phases: {"avg_gap_days": gaps[data.name], "p_active": 0.3},
        load_model=lambda ckpt, data: _Point(ckpt.state["w"])))
    study = rolling_study(reg, "ckworld", metric=METRIC, metrics=(METRIC,), per_window=False)
    out: dict[str, Any] = {"version": VERSION, "size": size, "replicate": r, "seed": seed,
                           "seconds": time.perf_counter() - t0, "claims": {}}
    for key, claim in (("past", CLAIM_PAST), ("best", CLAIM_BEST)):
        v, evidence = study.verdicts[claim]
        j = study.judged.get(claim, {})
        lo, hi = float(j.get("ci_low", math.nan)), float(j.get("ci_high", math.nan))
        level = float(j.get("level", 0.95))
        out["claims"][key] = {"claim": claim, "verdict": v, "strategy": j.get("strategy", ""),
                              "diff": float(j.get("diff", math.nan)), "ci": [lo, hi], "level": level,
                              "mde": mde_from_interval(lo, hi, level), "noted": "detects |difference|" in evidence,
                              "inconclusive": v == INCONCLUSIVE}
    shutil.rmtree(folder, ignore_errors=True)
    return out


def summarize(plan: RollingPlan, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (claim, size): the rate of "holds" with its MCSE (type-I error at size 0, else power), the estimate's
    mean and SD over replicates, the mean MDE, and how many inconclusive verdicts printed their MDE."""
    out = []
    for key in ("past", "best"):
        for size in plan.sizes:
            cs = [x["claims"][key] for x in runs if x["size"] == size]
            if not cs:
                continue
            rate = mcse_rate([c["verdict"] == "holds" for c in cs])
            diffs = np.array([c["diff"] for c in cs], dtype=float)
            mdes = np.array([c["mde"] for c in cs], dtype=float)
            inc = [c for c in cs if c["inconclusive"] and math.isfinite(c["mde"])]  # an interval to size
            out.append({"claim": cs[0]["claim"], "key": key, "size": size, "null": size == 0,
                        "holds": asdict(rate), "holds_text": rate.text(), "diff_mean": float(np.nanmean(diffs)),
                        "diff_sd": float(np.nanstd(diffs, ddof=1)) if len(diffs) > 1 else math.nan,
                        "mde_mean": float(np.nanmean(mdes)) if np.isfinite(mdes).any() else math.nan,
                        "inconclusive": len(inc), "inconclusive_noted": sum(c["noted"] for c in inc),
                        "n": len(cs)})
            x = out[-1]
            ses = np.array([se_from_interval(c["ci"][0], c["ci"][1], c["level"]) for c in cs], dtype=np.float64)
            se = float(np.nanmean(ses)) if np.isfinite(ses).any() else math.nan
            x["spread_ratio"] = x["diff_sd"] / se if se > 0 and math.isfinite(x["diff_sd"]) else math.nan
    return out


def run_rolling_calibration(plan: RollingPlan, out_dir: str | Path, progress: bool = True) -> dict[str, Any]:
    """Every replicate of ``plan``; writes ``OUT/rolling_calibration.json`` and returns it (its Markdown:
    :func:`mmgrid.render.calibration.write_rolling_calibration`)."""
    plan.check()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="rollcal-", dir=out) as tmp:
        for size in plan.sizes:
            for r in range(plan.replicates):
                runs.append(replicate(plan, float(size), r, Path(tmp)))
                if progress:
                    print(f"   size {size:g} replicate {r + 1}/{plan.replicates}: {runs[-1]['seconds']:.1f} s", flush=True)
    rows = summarize(plan, runs)
    seconds = time.perf_counter() - t0
    res = {"version": VERSION, "plan": asdict(plan), "seconds": seconds, "rows": rows, "runs": runs}
    (out / "rolling_calibration.json").write_text(json.dumps(_safe(res), indent=1))
    return res


def _safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_safe(x) for x in v]
    return v
