"""The rolling deployment study (``mmgrid sweep rolling``): which update strategy serves the next window
best, period after period, when it may use only what was known by then?

A grid with stages s_0 (e.g. pretrain), s_1, ..., s_K (each checkpoint theta_k fine-tuned from theta_{k-1})
deploys at every incremental period t = 1..K a model on the window after s_t (the next phase of
``data.phases`` in time order: s_{t+1}'s window, the test window after s_K). Every strategy builds that model
from the checkpoints theta_0..theta_t and the windows of s_0..s_t only (:class:`Past`):

* ``latest``: theta_t itself (MMGRid Eq. 10 at lambda = 1), the reference of every comparison;
* ``lambda*_past``: Eq. 10 on (theta_{t-1}, theta_t) at lambda*_{t-1}, the argmax of the metric of
  theta_{t-2} + lambda (theta_{t-1} - theta_{t-2}) on s_t's window (the last window seen; lambda = 1 at t = 1,
  where no earlier pair exists);
* ``lambda_mean_past``: the same at the mean of every lambda* measured so far (a smoother choice from the past);
* ``lambda_hat_past``: the same at lambda_hat*_t of MMGRid Eq. 11 fitted on the past (:func:`lambda_hat_past`):
  every pair (s, domain) with s <= t, of every domain of the run, gives the statistics known when theta_{s-1}
  was deployed (``sweeps.predict_lambda.features``, :func:`mmgrid.data.stats.period_stats`), its lambda*_s and
  p_s (the share of s_s's window users active in s_{s-1}); Eq. 11 inverted gives the non-active users'
  lambda*, (lambda*_s - p_s) / (1 - p_s); a least-squares line on the features predicts it from the statistics
  known at t, and Eq. 11 blends the prediction with p_t (the latest share measured: the next window's users
  are not known at t), clipped to the lambda grid. With fewer than ``len(features) + 2`` pairs it falls back
  to the mean of the past lambda* (lambda = 1 with none), and the record says so (``lambda_rule``);
* the temporal fusers of MMGRid's ``TemporalModelFuser`` and the EMA of TIME (``fuse_linear_velocity``,
  ``fuse_moving_average_velocity``, ``fuse_acceleration``, ``fuse_exp_decay``, ``ema``), where those merge
  methods are registered, over the whole sequence;
* the continual merges ``magmax``, ``opcm`` and ``dop`` over [theta_1..theta_t] on theta_0.

The strategy list is data (:data:`STRATEGIES`: a method, its parameters, which checkpoints it reads); a
strategy whose method is not registered is left out. Every merge goes through :func:`mmgrid.merge.api.merge`
with registry ids (streamed from the registry, tensor by tensor); every evaluation is recorded with a recipe
naming its input ids (its lineage; a re-run with the same recipe is a cache hit) and its per-user values.

Each deployment is evaluated on its window and, for the accuracy matrix, on every incremental window
(``R[i, j]``: deployment at s_i on s_j's window), so BWT, FWT (against theta_0) and forgetting are measured per
strategy (:mod:`mmgrid.eval.matrix`). :func:`rolling_study` reads it back: per strategy NDCG@10 / Recall@10 per
window and pooled over windows and domains, paired differences to ``latest`` with Holm (a window's intervals
over its users, seeds kept; pooled over windows, over the (domain, window) cells, :func:`pooled_difference`,
since a window's shift is shared by all its users), and the verdicts "lambda chosen from the past beats lambda
= 1 over the windows" and "the best strategy beats lambda = 1" (selection-aware: every strategy judged at the
family level 1 - 0.05 / K over the K compared; an inconclusive one with its minimum detectable effect at 80%
power, :func:`mmgrid.stats.mde_note`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np
import pandas as pd
import torch

from mmgrid.config import GridConfig
from mmgrid.errors import ConfigError, MmgridError
from mmgrid.eval.matrix import transfer_summary
from mmgrid.eval.ranking import record_evaluation
from mmgrid.eval.table import LEVEL, N_RESAMPLES, PerUser, align, newest_rows, seed_number
from mmgrid.merge.api import merge
from mmgrid.merge.methods import identity, method_names
from mmgrid.registry.names import hash_json
from mmgrid.runtime.plan import planned_ids
from mmgrid.stats import grouped_difference, grouped_mean_ci, holm, mean_ci, paired_difference
from mmgrid.stats.paired import PairedResult
from mmgrid.stats.regression import ols
from mmgrid.stats.verdict import FAILS, HOLDS, INCONCLUSIVE, mde_note, verdict, verdict_line
from mmgrid.merge.inplace import apply_if_fits
from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.checkpoints import load_checkpoint
from mmgrid.sweep.continual import run_seeds  # the one check of a seed subset
from mmgrid.sweep.evaluation import EvalFn, eval_key, paradigm_params
from mmgrid.sweep.results import recorded
from mmgrid.sweep.selection import blend_eq11, lambda_grid, select_lambda_star
from mmgrid.sweep.temporal import seeded_id

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset

STUDY = "rolling"
REFERENCE = "latest"
METRICS = ("ndcg@10", "recall@10")
CLAIM_PAST = "lambda chosen from the past beats lambda = 1 over the windows"
CLAIM_BEST = "the best strategy beats lambda = 1"


@dataclass(frozen=True)
class Strategy:
    """One way of building the deployed model.

    Attributes:
        name: its name in records and tables.
        method: a registered merge method.
        params: the method's parameters.
        inputs: ``last2`` (theta_{t-1}, theta_t), ``seq`` (theta_1..theta_t) or ``all`` (theta_0..theta_t).
        base: theta_0 as the task vectors' base.
        lam: ``past`` / ``mean_past`` / ``hat_past``: the temporal merge's lambda chosen from the past (params get
            ``lam``): the last lambda*, their mean, Eq. 11's lambda_hat* fitted on the past.
        min_inputs: fewer checkpoints than this at t: the strategy deploys ``latest``'s model (recorded so).
    """

    name: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    inputs: str = "last2"
    base: bool = False
    lam: str | None = None
    min_inputs: int = 1


STRATEGIES: tuple[Strategy, ...] = (
    Strategy(REFERENCE, "temporal", {"lam": 1.0}),
    Strategy("lambda*_past", "temporal", lam="past"),
    Strategy("lambda_mean_past", "temporal", lam="mean_past"),
    Strategy("lambda_hat_past", "temporal", lam="hat_past"),
    Strategy("fuse_linear_velocity", "fuse_linear_velocity", inputs="all", min_inputs=2),
    Strategy("fuse_moving_average_velocity", "fuse_moving_average_velocity", inputs="all", min_inputs=2),
    Strategy("fuse_acceleration", "fuse_acceleration", inputs="all", min_inputs=3),
    Strategy("fuse_exp_decay", "fuse_exp_decay", inputs="seq", base=True),
    Strategy("ema", "ema", inputs="all"),
    Strategy("magmax", "magmax", inputs="seq", base=True),
    Strategy("opcm", "opcm", inputs="seq", base=True),
    Strategy("dop", "dop", inputs="seq", base=True),
)

# (cfg, paradigm name, paradigm, domain data, prepared, window) -> EvalFn over that window's examples
WindowEvaluatorFactory = Callable[[GridConfig, str, Any, Any, Any, str], EvalFn]
# (prepared, domain data, phases read in time order) -> {statistic: value} known when the last phase ends
PeriodStatistics = Callable[[Any, Any, list[str]], dict[str, float]]
# the lambda_hat_past rules, as recorded in ``lambda_rule``
RULE_FIT, RULE_MEAN, RULE_ONE = "eq11_fit", "fallback_mean_past", "fallback_one"
P_ACTIVE_MAX = 0.95  # a pair whose window's users were almost all active says little about the non-active lambda*


@dataclass(frozen=True)
class RollingOptions:
    """How one (domain, seed) of the study runs.

    Attributes:
        strategies: the strategies (None: :func:`available`).
        evaluator_factory: the window evaluators (None: :func:`default_window_evaluator`).
        matrix: also evaluate each deployment on every incremental window (the accuracy matrix).
        redo: evaluate again what is recorded.
        watch: told ``(t, "checkpoint" | "window", value)`` for everything the deployment at t reads.
        statistics: the period statistics of ``lambda_hat_past`` (None: :func:`default_period_statistics`).
        load_model: ``(checkpoint, domain data) -> model`` (None: the paradigm's ``load``; a simulated world
            without a registered paradigm gives its own, as the calibration of the verdicts does).
    """

    strategies: list[Strategy] | None = None
    evaluator_factory: WindowEvaluatorFactory | None = None
    matrix: bool = True
    redo: bool = False
    watch: Callable[[int, str, Any], None] | None = None
    statistics: PeriodStatistics | None = None
    load_model: Callable[[Any, Any], Any] | None = None


@dataclass
class PastPairs:
    """The (statistics, lambda*) pairs of one seed, over its domains: what ``lambda_hat_past`` is fitted on.

    Attributes:
        stars: domain -> {s: lambda*_s} (:func:`past_lambdas`' memo).
        stats: (domain, k) -> the statistics known when stage k ends (:meth:`Past.statistics`).
    """

    stars: dict[str, dict[int, float]] = field(default_factory=dict)
    stats: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)

    def table(self, t: int, features: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x [n, p], lambda* [n], p_active [n]) of every pair s <= t of every domain with all its numbers."""
        xs, ys, ps = [], [], []
        for d in sorted(self.stars):
            for s, lam in sorted(self.stars[d].items()):
                before, at = self.stats.get((d, s - 1)), self.stats.get((d, s))
                if s > t or before is None or at is None:
                    continue
                x = [float(before.get(f, math.nan)) for f in features]
                p = float(at.get("p_active", math.nan))
                if all(math.isfinite(v) for v in x) and math.isfinite(p):
                    xs.append(x)
                    ys.append(float(lam))
                    ps.append(p)
        return (np.array(xs, dtype=float).reshape(len(xs), len(features)), np.array(ys, dtype=float),
                np.array(ps, dtype=float))


def lambda_hat_past(pairs: PastPairs, domain: str, t: int, features: list[str],
                    bounds: tuple[float, float]) -> tuple[float, str, int]:
    """lambda_hat*_t of MMGRid Eq. 11 fitted on the pairs s <= t: (lambda, rule, pairs used).

    Each pair's non-active lambda* is Eq. 11 inverted, (lambda*_s - p_s) / (1 - p_s) (pairs with p_s above
    :data:`P_ACTIVE_MAX` are left out); ordinary least squares on ``features`` predicts it at the statistics
    known at t, and Eq. 11 blends it with p_t; the result is clipped to ``bounds`` (the lambda grid searched).
    Fewer than ``len(features) + 2`` pairs: the mean of ``domain``'s past lambda* (:data:`RULE_MEAN`), or 1
    with none (:data:`RULE_ONE`).
    """
    x, y, p = pairs.table(t, features)
    keep = p <= P_ACTIVE_MAX
    x, y, p = x[keep], y[keep], p[keep]
    now = pairs.stats.get((domain, t), {})
    x_t = [float(now.get(f, math.nan)) for f in features]
    p_t = float(now.get("p_active", math.nan))
    if len(y) < len(features) + 2 or not all(math.isfinite(v) for v in [*x_t, p_t]):
        own = [v for s, v in sorted(pairs.stars.get(domain, {}).items()) if s <= t]
        return (float(np.mean(own)), RULE_MEAN, len(y)) if own else (1.0, RULE_ONE, len(y))
    intercept, coef = ols(x, (y - p) / (1.0 - p))
    lam = float(blend_eq11(intercept + float(np.asarray(x_t) @ coef), p_t))
    return float(np.clip(lam, *bounds)), RULE_FIT, len(y)


def default_period_statistics(prepared: Any, data: Any, phases: list[str]) -> dict[str, float]:
    """:func:`mmgrid.data.stats.period_stats` of a prepared domain on ``phases``."""
    from mmgrid.data.stats import period_stats  # lazy: polars, only when lambda_hat_past runs

    return period_stats(data.interactions, data.items, data.examples(phases[-1]), prepared.phases, phases)


def available(strategies: tuple[Strategy, ...] = STRATEGIES) -> list[Strategy]:
    """The strategies whose method is registered (the fusers and EMA slot in once they are)."""
    have = set(method_names())
    return [s for s in strategies if s.method in have]


def default_window_evaluator(cfg: GridConfig, name: str, paradigm: Any, domain: Any, prepared: PreparedDataset,
                             window: str) -> EvalFn:
    """The grid's evaluator (``eval:`` settings, users seeded by the first training seed) on ``window``."""
    from mmgrid.eval.grid import grid_evaluator  # lazy: the eval layer's evaluator

    return grid_evaluator(paradigm, domain, cfg, split=window, groups=["all"]).evaluate  # EvalResults, per user


def timeline(cfg: GridConfig) -> tuple[list[str], list[str]]:
    """(stages, deploy windows): the deployment at stage t (t >= 1) is judged on ``windows[t - 1]``, the phase
    after s_t in ``data.phases`` time order."""
    stages = list(cfg.train.stages)
    phases = list(cfg.data.phases)
    if len(stages) < 3:
        raise ConfigError(f"train.stages {stages}: the rolling study needs a first stage and at least two "
                          "incremental periods (e.g. [pretrain, q1, q2]); add periods to data.phases and train.stages.")
    windows = []
    for s in stages[1:]:
        i = phases.index(s)
        if i + 1 >= len(phases):
            raise ConfigError(f"data.phases: no window after stage {s!r} to deploy on; add one (e.g. test: "
                              "[START, END]) after the last trained phase.")
        windows.append(phases[i + 1])
    return stages, windows


class Past:
    """What a deployment at stage t may read: the checkpoints of stages 0..t and the windows of stages 0..t.
    Any other stage's checkpoint or window is refused (a leak is an error, not a number). ``watch(t, what,
    value)``, when given, is told every checkpoint id and window read (the look-ahead test)."""

    def __init__(self, ids: list[str], stages: list[str], t: int, evaluate: Callable[[str, dict], float],
                 registry: Registry, watch: Callable[[int, str, Any], None] | None = None) -> None:
        self._ids, self._stages, self.t, self._evaluate, self._watch = ids, stages, t, evaluate, watch
        # _Watched: a proxy with the Registry's interface
        self.registry = cast("Registry", _Watched(registry, t, watch)) if watch else registry

    def checkpoint(self, k: int) -> str:
        if not 0 <= k <= self.t:
            raise MmgridError(f"rolling: the deployment at {self._stages[self.t]} read the checkpoint of stage "
                              f"{k}, after it")
        if self._watch:
            self._watch(self.t, "checkpoint", self._ids[k])
        return self._ids[k]

    def statistics(self, k: int, fn: Callable[[list[str]], dict[str, float]]) -> dict[str, float]:
        """``fn`` on the phases of stages 0..k (k <= t): the statistics known when stage k ends."""
        if not 0 <= k <= self.t:
            raise MmgridError(f"rolling: the deployment at {self._stages[self.t]} read the statistics of stage "
                              f"{k}, after it")
        phases = self._stages[: k + 1]
        if self._watch:
            for w in phases:
                self._watch(self.t, "window", w)
        return fn(phases)

    def score(self, window: str, state: dict) -> float:
        """The metric of ``state`` on ``window`` (a window of stages 0..t only)."""
        if window not in self._stages[: self.t + 1]:
            raise MmgridError(f"rolling: the deployment at {self._stages[self.t]} read window {window!r}, after it")
        if self._watch:
            self._watch(self.t, "window", window)
        return self._evaluate(window, state)


def past_lambdas(past: Past, stages: list[str], grid: list[float], memo: dict[int, float]) -> list[float]:
    """lambda*_s for s = 2..t: the argmax over ``grid`` of theta_{s-2} + lambda (theta_{s-1} - theta_{s-2})
    on s_s's window (ties: closest to 1); ``memo`` keeps those found at earlier t (the same numbers)."""
    out = []
    for s in range(2, past.t + 1):
        if s not in memo:
            a, b = past.checkpoint(s - 2), past.checkpoint(s - 1)
            vals = [past.score(stages[s], merge("temporal", [a, b], registry=past.registry, lam=lam)) for lam in grid]
            memo[s] = float(select_lambda_star(grid, vals))
        out.append(memo[s])
    return out


def deploy(strategy: Strategy, past: Past, lams: list[float],
           hat: float | None = None) -> tuple[str, list[str], str | None, dict[str, Any]]:
    """(method, input ids, base id, params) of ``strategy``'s model at past.t, from the past only (a sequence
    shorter than ``min_inputs``: the latest checkpoint, Eq. 10 at lambda = 1); ``hat``: lambda_hat_past's
    lambda at past.t."""
    t = past.t
    params = dict(strategy.params)
    if strategy.lam is not None:
        if strategy.lam == "hat_past":
            if hat is None:
                raise MmgridError(f"rolling: strategy {strategy.name!r} deployed without its lambda_hat* at t = {t}")
            lam = hat
        else:
            lam = 1.0 if not lams else (lams[-1] if strategy.lam == "past" else float(np.mean(lams)))
        params["lam"] = round(float(lam), 9)
    first = {"last2": t - 1, "seq": 1, "all": 0}[strategy.inputs]
    ins = [past.checkpoint(k) for k in range(first, t + 1)]
    if len(ins) < strategy.min_inputs:
        return "temporal", [past.checkpoint(t - 1), past.checkpoint(t)], None, {"lam": 1.0}
    return strategy.method, ins, past.checkpoint(0) if strategy.base else None, params


def _recipe(strategy: Strategy, method: str, ins: list[str], base: str | None, params: dict, t_stage: str,
            window: str, ev: dict) -> dict[str, Any]:
    return {"strategy": strategy.name, **identity(method), "inputs": ins, "base": base, "params": params,
            "deployed_at": t_stage, "window": window, "eval": ev}


def run_rolling(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", options: RollingOptions = RollingOptions(),
                seeds: list[int] | None = None) -> "RollingStudy":
    """Run every strategy at every period on every configured domain and seed (recording each evaluation not
    yet recorded) and return :func:`rolling_study`."""
    evaluate_rolling(cfg, registry, prepared, options, seeds)
    t = cfg.sweeps.temporal
    return rolling_study(registry, t.paradigm, t.variant, t.metric)


def evaluate_rolling(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset",
                     options: RollingOptions = RollingOptions(), seeds: list[int] | None = None) -> int:
    """Evaluate the study; return the number of evaluations run (0: everything was recorded)."""
    domains = list(cfg.sweeps.temporal.domains or prepared.domains)
    unknown = [d for d in domains if d not in prepared.domains]
    if unknown:
        raise ConfigError(f"sweeps.temporal.domains: {unknown} not in the prepared dataset ({prepared.domains}).")
    timeline(cfg)
    strategies = list(options.strategies) if options.strategies is not None else available()
    hat = any(s.lam == "hat_past" for s in strategies)
    n = 0
    for seed in run_seeds(cfg, seeds):
        pairs = PastPairs()
        if hat:  # every domain's lambda* and statistics first: lambda_hat_past at t is fitted across domains
            for d in domains:
                evaluate_domain(cfg, registry, prepared, d, seed, options, pairs, measure=True)
        for d in domains:
            n += evaluate_domain(cfg, registry, prepared, d, seed, options, pairs)
    return n


def evaluate_domain(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", domain: str, seed: int,
                    options: RollingOptions = RollingOptions(), pairs: PastPairs | None = None,
                    measure: bool = False) -> int:
    """One (domain, seed): every deployment of every strategy, on its window (and the matrix's windows).

    ``options.watch(t, what, value)``, when given, is told every checkpoint id (``"checkpoint"``) and window
    (``"window"``) the construction of the deployment at t reads (tests check it never looks ahead).
    ``pairs``: the seed's (statistics, lambda*) pairs over domains, filled here with this domain's
    (None: this domain's only); ``measure``: only fill them (lambda* and statistics at every t), deploy nothing.

    Raises:
        ConfigError: a ``sweeps.predict_lambda.features`` name the period statistics lack (before anything is
            recorded)."""
    strategies = list(options.strategies) if options.strategies is not None else available()
    matrix, redo, watch = options.matrix, options.redo, options.watch

    t_cfg = cfg.sweeps.temporal
    stages, windows = timeline(cfg)
    plan = planned_ids(cfg, registry)
    coords = {"paradigm": t_cfg.paradigm, "domain": domain, "variant": t_cfg.variant, "kind": "trained"}
    shared, first = set(cfg.train.shared_stages), cfg.train.seed_list[0]  # shared stages: trained on the first seed
    ids = [seeded_id(registry, {**coords, "period": s}, first if s in shared else seed, plan) for s in stages]
    data = prepared.domain(domain)
    par = get_paradigm(t_cfg.paradigm) if options.load_model is None else None
    params = paradigm_params(cfg, t_cfg.paradigm)
    load = options.load_model
    if load is None:
        assert par is not None  # no loader given: the paradigm loads
        load = lambda ckpt, dom: par.load(ckpt, dom, params)  # noqa: E731
    factory = options.evaluator_factory or default_window_evaluator
    evs: dict[str, EvalFn] = {}
    model_box: list[Any] = []

    def evaluator(window: str) -> EvalFn:
        if window not in evs:
            evs[window] = factory(cfg, t_cfg.paradigm, par, data, prepared, window)
        return evs[window]

    def run(window: str, state: dict, template: str) -> Any:
        """Evaluate ``state`` on ``window`` as a model of ``template``'s files (a checkpoint of the past)."""
        added = (registry.get(template).meta or {}).get("added_rows")
        if not model_box or added or not apply_if_fits(model_box[0], state):
            m = load(load_checkpoint(registry, template, state=state), data)
            model_box[:] = [m]
        model_box[0].eval()
        with torch.no_grad():
            return evaluator(window)(model_box[0])

    ev = {**_eval_key(cfg), "matrix": bool(matrix)}
    grid = [round(float(x), 9) for x in lambda_grid(t_cfg.start, t_cfg.stop, t_cfg.step)]
    pairs = pairs if pairs is not None else PastPairs()
    memo = pairs.stars.setdefault(domain, {})
    hat_on = any(s.lam == "hat_past" for s in strategies)
    features = list(cfg.sweeps.predict_lambda.features)
    stat_fn = options.statistics or default_period_statistics

    def statistics(phases: list[str]) -> dict[str, float]:
        got = stat_fn(prepared, data, phases)
        missing = [f for f in [*features, "p_active"] if f not in got]
        if missing:
            raise ConfigError(f"sweeps.predict_lambda.features: the period statistics of lambda_hat_past lack "
                              f"{missing} (they have {sorted(got)}); name those, e.g. [avg_gap_days], or drop "
                              "the lambda_hat_past strategy.")
        return got

    n = 0
    eval_windows = (stages[1:] if matrix else [])
    for t in range(1, len(stages)):
        past = Past(ids, stages, t, lambda w, st, _t=t: float(run(w, st, ids[_t])["all"][t_cfg.metric]), registry,  # type: ignore[misc]  # mypy infers no lambda with a default
                    watch)
        lams = past_lambdas(past, stages, grid, memo) if any(s.lam for s in strategies) else []
        hat = rule = None
        n_pairs = 0
        if hat_on:
            if (domain, t) not in pairs.stats:
                pairs.stats[(domain, t)] = past.statistics(t, statistics)
        if measure:
            continue
        if hat_on:
            hat, rule, n_pairs = lambda_hat_past(pairs, domain, t, features, (min(grid), max(grid)))
        targets = list(dict.fromkeys([windows[t - 1], *eval_windows]))
        for strategy in strategies:
            method, ins, base, prm = deploy(strategy, past, lams, hat)
            recs = {w: _recipe(strategy, method, ins, base, prm, stages[t], w, ev) for w in targets}
            hashes = {w: hash_json(r) for w, r in recs.items()}
            done = set() if redo else recorded(registry, list(hashes.values()), STUDY)
            if set(hashes.values()) <= done:
                continue
            state = merge(method, ins, base=base, registry=past.registry, **prm)  # streamed from the registry
            for w in targets:
                if hashes[w] in done:
                    continue
                res = run(w, state, ids[t])
                extra = {"study": STUDY, "strategy": strategy.name, "paradigm": t_cfg.paradigm,
                         "variant": t_cfg.variant, "domain": domain, "eval_domain": domain, "method": method,
                         "seed": seed, "deployed_at": stages[t], "t": t, "window": w,
                         "deploy": w == windows[t - 1], "lambda": prm.get("lam") if method == "temporal" else None}
                if strategy.lam == "hat_past":
                    extra.update(lambda_rule=rule, lambda_pairs=n_pairs)
                record_evaluation(registry, None, w, res, recipe=recs[w], extra=extra)
                n += 1
    if not measure:
        _record_start(registry, ids[0], run, stages, domain, seed, ev, t_cfg)
    return n


def _record_start(registry: Registry, first: str, run: Callable, stages: list[str], domain: str,
                  seed: int, ev: dict, t_cfg: Any) -> None:
    """theta_0 on every incremental window: the start row b of FWT (recorded once per recipe)."""
    todo = {w: {"strategy": "start", **identity("temporal"), "inputs": [first, first], "base": None,
                "params": {"lam": 1.0}, "window": w, "eval": ev} for w in stages[1:]}
    hashes = {w: hash_json(r) for w, r in todo.items()}
    done = recorded(registry, list(hashes.values()), STUDY)
    state = None
    for w, rec in todo.items():
        if hashes[w] in done:
            continue
        state = state if state is not None else registry.load(first)
        res = run(w, state, first)
        record_evaluation(registry, None, w, res, recipe=rec,
                          extra={"study": STUDY, "strategy": "start", "paradigm": t_cfg.paradigm,
                                 "variant": t_cfg.variant, "domain": domain, "eval_domain": domain, "seed": seed,
                                 "deployed_at": stages[0], "t": 0, "window": w, "deploy": False})


class _Watched:
    """A registry whose reads of checkpoints are reported to ``watch`` (the study's look-ahead test)."""

    def __init__(self, registry: Registry, t: int, watch: Callable) -> None:
        self._r, self._t, self._w = registry, t, watch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._r, name)
        if name in ("get", "load", "open_tensors", "tensor_info", "file"):
            def wrapped(ref: Any, *a: Any, **k: Any) -> Any:
                self._w(self._t, "checkpoint", ref)
                return attr(ref, *a, **k)
            return wrapped
        return attr


def _eval_key(cfg: GridConfig) -> dict[str, Any]:
    return eval_key(cfg)


# --------------------------------------------------------------------------- the result


@dataclass
class RollingStudy:
    """The study's typed result.

    Attributes:
        metric: the metric of the verdicts (``sweeps.temporal.metric``).
        rows: one row per (domain, strategy, window, metric) of the deployed model on its window (domain "all":
            every domain's users; window "all": every window's users pooled): mean, ci_low, ci_high, diff,
            diff_low, diff_high (strategy - latest on the same users), p, p_holm (over the strategies of the same
            domain, window and metric), n_users, n_seeds. A row of one window has its intervals over users; a
            row pooled over windows, over its (domain, window) cells (:func:`pooled_difference`).
        matrices: (domain, strategy) -> {"windows", "R" (deployment i on window j, seed-and-user means), "b",
            "bwt", "fwt", "forgetting"}.
        transfer: one row per (domain, strategy): bwt, fwt, forgetting.
        verdicts: claim -> (verdict, evidence).
        judged: claim -> what its verdict was judged on: strategy, diff, ci_low, ci_high, level, p.
        windows: the deploy windows in time order.
    """

    metric: str
    rows: pd.DataFrame
    matrices: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    transfer: pd.DataFrame = field(default_factory=pd.DataFrame)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    judged: dict[str, dict[str, Any]] = field(default_factory=dict)
    windows: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.rows.empty

    def verdict_lines(self) -> list[str]:
        return [verdict_line(c, v, e, LEVEL) for c, (v, e) in self.verdicts.items()]


def _frame(registry: Registry, metric: str, paradigm: str, variant: str) -> pd.DataFrame:
    df = registry.results(study=STUDY, metric=metric, group="all")
    if df.empty:
        return df
    for col, want in (("paradigm", paradigm), ("variant", variant)):
        if col in df.columns:
            df = df[df[col] == want]
    df = df.copy()
    df["seed_k"] = [seed_number(v) for v in df["seed"]] if "seed" in df.columns else -1
    return newest_rows(df, ["domain", "strategy", "deployed_at", "window", "seed_k"])


def _values(df: pd.DataFrame, pu: PerUser, metric: str) -> dict[tuple, tuple]:
    """(domain, strategy, deployed_at, window) -> (users, values [n_seeds, n], seeds)."""
    out = {}
    for key, g in df.groupby(["domain", "strategy", "deployed_at", "window"], sort=True):
        g = g.sort_values("seed_k")
        m = pu.matrix(g, metric)
        if m is not None:
            out[key] = (m[0], m[1], list(g["seed_k"]))
    return out


def _pair(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Seed- and user-matched values of two cells: (users, va, vb), None where they share none."""
    (ua, va, sa), (ub, vb, sb) = a, b
    seeds = [s for s in sa if s in sb]
    if not seeds:
        return None
    va, vb = va[[sa.index(s) for s in seeds]], vb[[sb.index(s) for s in seeds]]
    ia, ib = align(ua, ub)
    return None if ia.size == 0 else (ua[ia], va[:, ia], vb[:, ib])


def _stacked(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple | None:
    """Pairs of several (domain, window) cells side by side, each cell's users its own clusters: (users, va, vb,
    cells), ``cells`` the cell number of each column (the groups of the interval over cells)."""
    if not parts or len({p[1].shape[0] for p in parts}) != 1:
        return None
    users = np.concatenate([p[0].astype(np.int64) + i * 10**9 for i, p in enumerate(parts)])
    cells = np.concatenate([np.full(p[0].shape[0], i) for i, p in enumerate(parts)])
    return users, np.concatenate([p[1] for p in parts], 1), np.concatenate([p[2] for p in parts], 1), cells


def pooled_difference(a: np.ndarray, b: np.ndarray, users: np.ndarray, cells: np.ndarray,
                      level: float = LEVEL) -> PairedResult:
    """A - B pooled over (domain, window) cells: over two or more cells the interval and p are over the cells
    (:func:`mmgrid.stats.grouped_difference`: a window's shift shared by all its users is in it); in one cell,
    over its users (:func:`mmgrid.stats.paired_difference`, users as clusters)."""
    if len(np.unique(cells)) >= 2:
        return grouped_difference(a, b, cells, level=level)
    return paired_difference(a, b, level=level, n_resamples=N_RESAMPLES, clusters=users)


def _pooled_mean(a: np.ndarray, users: np.ndarray, cells: np.ndarray | None) -> tuple[float, float, float]:
    """A pooled mean with the interval of :func:`pooled_difference` (over cells from two of them on)."""
    if cells is not None and len(np.unique(cells)) >= 2:
        return grouped_mean_ci(a, cells, level=LEVEL)[:3]
    return mean_ci(a, level=LEVEL, n_resamples=N_RESAMPLES, clusters=users)


def rolling_study(registry: Registry, paradigm: str, variant: str = "default", metric: str = "ndcg@10",
                  metrics: tuple[str, ...] = METRICS, per_window: bool = True) -> RollingStudy:
    """Read the study back from the registry and compare every strategy with ``latest`` (``per_window`` False:
    only the rows pooled over every domain and window, and the verdicts)."""
    pu = PerUser(registry)
    rows: list[dict[str, Any]] = []
    study = RollingStudy(metric, pd.DataFrame())
    for met in dict.fromkeys((metric, *metrics)):
        df = _frame(registry, met, paradigm, variant)
        if df.empty:
            continue
        dep = df[df["deploy"].astype(bool)] if "deploy" in df.columns else df.iloc[0:0]
        windows = [w for _, w in sorted({(int(t), str(w)) for t, w in zip(dep["t"], dep["window"])})]
        vals = _values(dep, pu, met)
        rows += _rows(vals, windows, met, per_window)
        if met == metric:
            study.windows = windows
            study.matrices = _matrices(_values(df, pu, met), df)
            _verdicts(study, vals)
    cols = ["domain", "strategy", "window", "metric", "mean", "ci_low", "ci_high", "diff", "diff_low", "diff_high",
            "p", "n_users", "n_seeds"]
    out = pd.DataFrame(rows, columns=cols)
    out["p_holm"] = np.nan
    for _, g in out[out["p"].notna()].groupby(["domain", "window", "metric"]):
        out.loc[g.index, "p_holm"] = holm(g["p"].to_numpy(dtype=float))
    study.rows = out
    study.transfer = pd.DataFrame([{"domain": d, "strategy": s, **{k: m[k] for k in ("bwt", "fwt", "forgetting")}}
                                   for (d, s), m in sorted(study.matrices.items())],
                                  columns=["domain", "strategy", "bwt", "fwt", "forgetting"])
    return study


def _row(domain: str, strat: str, window: str, met: str, pair: tuple | None, own: tuple | None) -> dict[str, Any]:
    """One table row; a ``pair`` of :func:`_stacked` pooled over windows (``window`` "all") has its intervals
    and p over the (domain, window) cells, any other over users."""
    row = {"domain": domain, "strategy": strat, "window": window, "metric": met, "mean": math.nan,
           "ci_low": math.nan, "ci_high": math.nan, "diff": math.nan, "diff_low": math.nan, "diff_high": math.nan,
           "p": math.nan, "n_users": 0, "n_seeds": 0}
    if pair is None:
        if own is not None:
            row.update(mean=float(own[1].mean()), n_users=int(own[1].shape[1]), n_seeds=int(own[1].shape[0]))
        return row
    users, a, b = pair[:3]
    cells = pair[3] if len(pair) > 3 and window == "all" else np.zeros(users.shape[0], dtype=int)
    mean, lo, hi = _pooled_mean(a, users, cells)
    row.update(mean=float(mean), ci_low=lo, ci_high=hi, n_users=int(a.shape[1]), n_seeds=int(a.shape[0]))
    if strat == REFERENCE:
        row.update(diff=0.0, diff_low=0.0, diff_high=0.0)
    else:
        r = pooled_difference(a, b, users, cells)
        row.update(diff=r.diff, diff_low=r.ci_low, diff_high=r.ci_high, p=r.pvalue)
    return row


def _rows(vals: dict, windows: list[str], met: str, per_window: bool = True) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    domains = sorted({k[0] for k in vals})
    strats = sorted({k[1] for k in vals}, key=lambda s: (s != REFERENCE, s))
    for strat in strats:
        pooled_all = []
        for d in domains:
            pooled = []
            for w in windows:
                key = next((k for k in vals if k[0] == d and k[1] == strat and k[3] == w), None)
                ref = next((k for k in vals if k[0] == d and k[1] == REFERENCE and k[3] == w), None)
                if key is None:
                    continue
                pair = _pair(vals[key], vals[ref]) if ref is not None else None
                if per_window:
                    rows.append(_row(d, strat, w, met, pair, vals[key]))
                if pair is not None:
                    pooled.append(pair)
            pooled_all += pooled
            if per_window:
                rows.append(_row(d, strat, "all", met, _stacked(pooled), None))
        for w in windows if per_window else []:
            parts = []
            for d in domains:
                key = next((k for k in vals if k[0] == d and k[1] == strat and k[3] == w), None)
                ref = next((k for k in vals if k[0] == d and k[1] == REFERENCE and k[3] == w), None)
                if key is not None and ref is not None and (p := _pair(vals[key], vals[ref])) is not None:
                    parts.append(p)
            rows.append(_row("all", strat, w, met, _stacked(parts), None))
        rows.append(_row("all", strat, "all", met, _stacked(pooled_all), None))
    return rows


def _matrices(vals: dict, df: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """(domain, strategy) -> the accuracy matrix over the incremental windows (seed-and-user means)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if "t" not in df.columns:
        return out
    stage_of = {str(a): int(t) for a, t in zip(df["deployed_at"], df["t"])}
    mean = {k: float(v[1].mean()) for k, v in vals.items()}
    for d in sorted({k[0] for k in vals}):
        start = {k[3]: m for k, m in mean.items() if k[0] == d and k[1] == "start"}
        wins = sorted(start, key=lambda w: stage_of.get(w, 0))  # the windows of the stages, in time order
        if len(wins) < 2:
            continue
        for strat in sorted({k[1] for k in vals if k[0] == d and k[1] != "start"}):
            deps = sorted({k[2] for k in vals if k[0] == d and k[1] == strat}, key=lambda a: stage_of.get(a, 0))
            R = np.full((len(deps), len(wins)), np.nan)
            for i, a in enumerate(deps):
                for j, w in enumerate(wins):
                    R[i, j] = mean.get((d, strat, a, w), np.nan)
            if R.shape[0] != R.shape[1] or np.isnan(R).any():
                continue
            b = np.array([start[w] for w in wins])
            out[(d, strat)] = {"windows": wins, "deployed_at": deps, "R": R.tolist(), "b": b.tolist(),
                               **transfer_summary(R, b)}
    return out


def _verdicts(study: RollingStudy, vals: dict) -> None:
    """CLAIM_PAST: ``lambda*_past`` - ``latest`` pooled over every (domain, window) cell, its interval over the
    cells (:func:`pooled_difference`). CLAIM_BEST, selection-aware: each of the K strategies compared with
    ``latest`` gets the same interval at the family level 1 - (1 - LEVEL) / K (Bonferroni, Holm's first step):
    the claim holds when some strategy's lies above 0 (the highest mean of those is named), does not hold when
    every one lies below 0, and is inconclusive otherwise (the highest mean is named, with its MDE at that
    level). ``study.judged`` keeps each claim's strategy, difference and the interval it was judged on."""
    def pooled(strat: str) -> tuple | None:
        parts = []
        for k, v in vals.items():
            if k[1] != strat:
                continue
            ref = next((r for r in vals if r[0] == k[0] and r[1] == REFERENCE and r[3] == k[3]), None)
            if ref is not None and (p := _pair(v, vals[ref])) is not None:
                parts.append(p)
        return _stacked(parts)

    def compare(strat: str, level: float) -> tuple[PairedResult, int] | None:
        st = pooled(strat)
        if st is None:
            return None
        users, a, b, cells = st
        return pooled_difference(a, b, users, cells, level=level), len(np.unique(cells))

    def text(strat: str, r: PairedResult, cells: int, level: float, note: str = "") -> str:
        over = (f"interval over the {cells} (domain, window) cells" if cells >= 2 else
                "interval over users (one cell: no window-to-window spread to measure)")
        return (f"{study.metric} over {len(study.windows)} windows: {strat} {r.mean_a:.4f} vs {REFERENCE} "
                f"{r.mean_b:.4f}, difference {r.diff:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}] ({level:.2%} interval), "
                f"{over}, p = {r.pvalue:.3g}, {r.n_seeds} seed(s){note}")

    def record(claim: str, v: str, strat: str, r: PairedResult, level: float, evidence: str) -> None:
        size = f"; {mde_note(r.ci_low, r.ci_high, level, what='difference')}" if v == INCONCLUSIVE else ""
        study.verdicts[claim] = (v, evidence + size)
        study.judged[claim] = {"strategy": strat, "diff": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high,
                               "level": level, "p": r.pvalue}

    got = compare("lambda*_past", LEVEL)
    if got is None:
        study.verdicts[CLAIM_PAST] = (INCONCLUSIVE, f"lambda*_past not evaluated beside {REFERENCE}")
    else:
        r, cells = got
        record(CLAIM_PAST, verdict(r.ci_low, r.ci_high, "greater"), "lambda*_past", r, LEVEL,
               text("lambda*_past", r, cells, LEVEL))
    names = [s for s in sorted({k[1] for k in vals} - {REFERENCE}) if pooled(s) is not None]  # the K compared
    level = 1.0 - (1.0 - LEVEL) / max(1, len(names))
    results = {s: got for s in names if (got := compare(s, level)) is not None}
    if not results:
        study.verdicts[CLAIM_BEST] = (INCONCLUSIVE, "no strategy but latest evaluated")
        return
    verdicts = {s: verdict(r.ci_low, r.ci_high, "greater") for s, (r, _) in results.items()}
    winners = [s for s, v in verdicts.items() if v == HOLDS]
    best = max(winners or results, key=lambda s: results[s][0].diff)
    v = HOLDS if winners else FAILS if all(x == FAILS for x in verdicts.values()) else INCONCLUSIVE
    r, cells = results[best]
    note = (f"; {best} is the highest-mean strategy whose interval lies above 0" if winners else
            f"; {best} has the highest mean") + (f"; each of the {len(results)} strategies compared with "
                                                  f"{REFERENCE} is judged at the family level {level:.2%} "
                                                  "(Bonferroni, Holm's first step): chosen among them, the claim "
                                                  "errs at most 5% of the time where none beats it")
    record(CLAIM_BEST, v, best, r, level, text(best, r, cells, level, note))

