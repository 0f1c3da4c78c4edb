"""The calibration study's estimands, their population values and the performance measures.

Morris, White & Crowther (Stat Med 2019): per finding and planted size, the rate of "holds" (type-I error
when the population value is the estimand's null, power otherwise), the coverage of the population value
by the replicates' 95% intervals, the bias, each with its Monte Carlo standard error, and the minimum
detectable effect at the configured power from the replicates' mean interval width.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from mmgrid.stats import HOLDS, verdict
from mmgrid.stats.power import Bias, Rate, mcse_bias, mcse_rate, mde, se_from_interval, within_mcse
from mmgrid.sweep.calibration.replicate import as_float, json_safe
from mmgrid.sweep.selection import select_lambda_star

FINDINGS: dict[str, tuple[str, str, str, float]] = {
    "lambda_star": ("Figure 5 / Table 4", "each domain's non-active lambda* interval covers its population value",
                    "non-active users' lambda* per domain (argmax of the expected NDCG@10 curve)", float("nan")),
    "t4_rho": ("Table 4", "the non-active users' lambda* falls as the average interaction time gap rises",
               "Spearman's rho(avg_gap_days, non-active lambda*) over domains; holds if its interval is below 0", 0.0),
    "f5_not1": ("Figure 5", "lambda = 1 is not the best lambda in every domain (all users)",
                "max over domains of |lambda* - 1| (all users); holds if some domain's interval at the family level "
                "(Bonferroni over the domains) excludes 1", 0.0),
    "f5_varies": ("Figure 5", "the best lambda differs between domains (all users)",
                  "max over pairs of domains of |lambda*_a - lambda*_b| (all users); holds if some pair's 95% intervals "
                  "are disjoint (the report's rule)", 0.0),
    "t2_popular": ("Table 2", "every calibrated GR paradigm beats most-popular (NDCG@10, users of all domains pooled)",
                   "paradigm - most-popular NDCG@10, mean paired per-user difference (the swept paradigm; with "
                   "sweeps.calibrate.t2_paradigms each of them); holds if every paradigm's interval is above 0", 0.0),
}

# What MMGRid reports for the findings, for "MMGRid reports Y" beside an MDE
# (:func:`mmgrid.stats.verdict.mde_note`): finding -> (value, where it comes from).
PUBLISHED: dict[str, tuple[float, str]] = {
    # Spearman's rho of Table 4's "Ave. Interaction Time Gap" with the non-active lambda* over its six domains
    "t4_rho": (-0.886, "MMGRid Table 4: rho(avg gap, non-active lambda*) over 6 domains"),
    # Table 4's non-active lambda* spans 0.700 (Sports) .. 1.165 (Cell Phones): the largest |lambda* - 1|
    "f5_not1": (0.300, "MMGRid Table 4: largest |non-active lambda* - 1| (Sports 0.700)"),
    # the same column's range: 1.165 (Cell Phones) - 0.700 (Sports)
    "f5_varies": (0.465, "MMGRid Table 4: range of the non-active lambda* over 6 domains (0.700 .. 1.165)"),
    # Table 3: lambda_hat* - (lambda = 1) in NDCG@10, mean over the six domains, absolute (relative: +0.25%;
    # per domain -1.9% .. +3.8%)
    "t3_hat": (0.0000217, "MMGRid Table 3: mean lambda_hat* - 1 in NDCG@10 (+0.25% relative)"),
}

# --------------------------------------------------------------------------- population values


def population_values(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The estimands' population values from population runs (each with a large test population).

    lambda* per (domain, group): argmax (ties to 1) of the NDCG@10 curve averaged over the runs; rho: Spearman
    between the runs' mean avg_gap_days and the non-active population lambda*; f5_not1: max |lambda* - 1| over
    domains (all users); t2_popular: the users-weighted mean of the runs' paired differences, with the SE of
    that mean over runs as its own precision (NaN with one run)."""
    # lazy: scipy (~0.3 s) through mmgrid.stats.association
    from mmgrid.stats.association import spearman_rho

    if not runs:
        return {}
    domains = runs[0]["domains"]
    out: dict[str, Any] = {"n_runs": len(runs), "lambda_star": {}, "avg_gap": {}}
    for d in domains:
        out["avg_gap"][d] = float(np.mean([r["avg_gap"][d] for r in runs]))
        for g in ("all", "active", "non_active"):
            cs = [r["curves"].get(d, {}).get(g) for r in runs]
            if not all(cs) or len({tuple(c["lambdas"]) for c in cs}) != 1:
                continue
            mean = np.mean([c["mean"] for c in cs], axis=0)
            out["lambda_star"].setdefault(d, {})[g] = select_lambda_star(cs[0]["lambdas"], mean)
            out.setdefault("lambda_star_se", {}).setdefault(d, {})[g] = _mean_se(
                [(r.get("lambda_star") or {}).get(d, {}).get(g) for r in runs])
    na = [out["lambda_star"].get(d, {}).get("non_active") for d in domains]
    if len(domains) >= 3 and all(v is not None for v in na):
        out["t4_rho"] = spearman_rho([out["avg_gap"][d] for d in domains], na)
        if not math.isfinite(out["t4_rho"]):
            out["t4_rho"] = 0.0  # every domain's lambda* alike: no association (the null world's value)
    al = [out["lambda_star"].get(d, {}).get("all") for d in domains]
    if al and all(v is not None for v in al):
        out["f5_not1"] = float(max(abs(v - 1.0) for v in al))
        out["f5_varies"] = float(max(al) - min(al))  # the largest pairwise |lambda*_a - lambda*_b|
    t2 = [r["t2_popular"] for r in runs if r.get("t2_popular")]
    if t2:
        out["t2_popular"], out["t2_popular_se"], out["t2_popular_runs"] = _pooled(t2)
    pars = sorted({p for r in runs for p in (r.get("t2_each") or {})})
    out["t2_each"] = {p: dict(zip(("value", "se", "runs"), _pooled([r["t2_each"][p] for r in runs
                                                                   if p in (r.get("t2_each") or {})])))
                      for p in pars}
    return out


def _mean_se(rows: list[list[Any] | None], level: float = 0.95) -> float:
    """The population lambda*'s own standard error, approximately: the runs' interval SEs combined as for the
    mean of independent estimates, sqrt(sum se_i^2) / n (NaN where a run has no interval)."""
    se = [se_from_interval(as_float(x[1]), as_float(x[2]), level) if x and x[1] is not None else float("nan")
          for x in rows]
    return float(math.sqrt(sum(v * v for v in se)) / len(se)) if se and all(math.isfinite(v) for v in se) else float("nan")


def _pooled(rows: list[list[Any]]) -> tuple[float, float, list[float]]:
    """Users-weighted mean of the runs' differences, its SE over runs (NaN with one run), the runs' values."""
    w = np.array([as_float(x[4]) for x in rows])
    v = np.array([as_float(x[0]) for x in rows])
    se = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan")
    return float((w * v).sum() / w.sum()), se, [float(x) for x in v]


# --------------------------------------------------------------------------- performance measures


@dataclass
class FindingCalibration:
    """One finding at one planted size: rates with MCSE, coverage, bias, MDE."""

    finding: str
    size: float
    population: float  # the estimand's population value at this size (NaN: undefined)
    is_null: bool  # the population value is the estimand's null (a rate of "holds" is then a type-I error)
    holds: Rate | None  # rate of "holds" (type-I error under the null, power otherwise)
    coverage: Rate | None  # share of intervals containing the population value
    bias: Bias | None  # mean estimate - population value
    mde: float  # minimum detectable effect at the configured power, from the mean interval width
    n: int  # replicates with an estimate
    # lambda_star: coverage, bias, MDE per domain; t2_popular with several paradigms: the same per paradigm
    per_domain: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what coverage and bias are measured against: "configuration" (the population value, over world seeds) or
    # "own world" (each replicate's own world with more users: sweeps.calibrate.t2_population: world)
    coverage_of: str = "configuration"
    # with "own world": the coverage a correct 95% interval reaches against a target with the own-world runs'
    # noise, mean over replicates of 2 Phi(z se_r / sqrt(se_r^2 + se_w^2)) - 1 (NaN otherwise)
    coverage_expected: float = float("nan")
    # with "own world": the coverage of the configuration's value by the same intervals, kept for comparison
    coverage_config: Rate | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def _interval_mde(rows: list[list[Any]], level: float, power: float) -> float:
    se = [se_from_interval(as_float(r[1]), as_float(r[2]), level) for r in rows]
    se = [s for s in se if math.isfinite(s)]
    return mde(float(np.mean(se)), 1.0 - level, power) if se else float("nan")


EXCHANGEABLE = {"turnover", "trend_contrast", "domain_contrast"}  # at size 0 these make the domains exchangeable


def calibrate_finding(finding: str, size: float, runs: list[dict[str, Any]], pop: dict[str, Any], level: float = 0.95,
                      power: float = 0.8, knobs: list[str] | tuple[str, ...] = (),
                      own: list[dict[str, Any] | None] | None = None) -> FindingCalibration:
    """The performance measures of ``finding`` over replicate ``runs`` of one planted size.

    ``knobs``: the plant knobs the size sets. When they include :data:`EXCHANGEABLE` and the size is 0, the
    domains are exchangeable, so rho's population value and the range of the domains' lambda* (``f5_varies``)
    are 0 by symmetry (known truth, not estimated: the population runs' own range is their noise).
    ``own`` (Table 2 and lambda*; aligned with ``runs``, None where a replicate has none): each replicate's
    own-world population run. Coverage and bias are then measured against each replicate's own world's value
    (the estimand its interval is about: the difference, or the non-active lambda*, in *this* world, over its
    users and training seeds), not the configuration's; the configuration's coverage is kept beside it."""
    null = FINDINGS[finding][3]
    if finding in ("t4_rho", "f5_varies") and float(size) == 0.0 and EXCHANGEABLE <= set(knobs):
        pop = {**pop, finding: 0.0}  # alike domains: one lambda* for all, so no association and no range
    if finding == "lambda_star":
        per, hits, expected = {}, [], []
        for d in sorted(pop.get("lambda_star", {})):
            truth = pop["lambda_star"][d].get("non_active")
            rows = [r["lambda_star"].get(d, {}).get("non_active") for r in runs]
            rows = [x for x in rows if x is not None and x[1] is not None]
            if truth is None or not rows:
                continue
            cov = [as_float(x[1]) - 1e-9 <= truth <= as_float(x[2]) + 1e-9 for x in rows]
            hits += cov
            se_r = [se_from_interval(as_float(x[1]), as_float(x[2]), level) for x in rows]
            se_p = as_float((pop.get("lambda_star_se") or {}).get(d, {}).get("non_active"))
            exp = _expected_coverage(se_r, se_p, level)
            expected += exp
            ok = [s for s in se_r if math.isfinite(s) and s > 0]
            per[d] = {"population": truth, "coverage": asdict(mcse_rate(np.array(cov))),
                      "bias": asdict(mcse_bias([as_float(x[0]) for x in rows], truth)),
                      "mde": _interval_mde(rows, level, power), "population_se": se_p,
                      "estimates": [float(q) for q in np.quantile([as_float(x[0]) for x in rows], [0.0, 0.5, 1.0])],
                      "coverage_expected": float(np.mean(exp)) if exp else float("nan"),
                      # the replicates' spread against what their intervals imply: above 1, the worlds differ by
                      # more than one world's interval allows (world-to-world variation the interval leaves out)
                      "spread_ratio": float(np.std([as_float(x[0]) for x in rows], ddof=1) / np.mean(ok))
                      if len(rows) > 1 and ok else float("nan")}
        cov_rate = mcse_rate(np.array(hits)) if hits else None
        res = FindingCalibration(finding, size, float("nan"), False, None, cov_rate, None, float("nan"), len(runs), per,
                                 coverage_expected=float(np.mean(expected)) if expected else float("nan"))
        if own is not None:
            _own_world_lambda(res, runs, own, level)
        return res
    truth = as_float(pop.get(finding))
    if finding == "f5_not1":
        got = [r["f5_not1"] for r in runs if r.get("f5_not1")]
        holds = mcse_rate(np.array([g["holds"] for g in got])) if got else None
        b = mcse_bias([g["max_dev"] for g in got], truth) if got else None
        rows = [x for r in runs for x in (v.get("all") for v in r.get("lambda_star", {}).values())
                if x is not None and x[1] is not None]  # every domain's all-users lambda* interval
        return FindingCalibration(finding, size, truth, math.isfinite(truth) and abs(truth - null) < 1e-9, holds, None,
                                  b, _interval_mde(rows, level, power), len(got))
    if finding == "f5_varies":
        return _f5_varies(size, runs, truth, level, power)
    rows = [r[finding] for r in runs if r.get(finding) and r[finding][1] is not None]
    holds = mcse_rate(np.array([interval_holds(finding, x) for x in rows])) if rows else None
    parts: dict[str, dict[str, Any]] = {}
    if finding == "t2_popular" and any(len(r.get("t2_each") or {}) > 1 for r in runs):
        # "every GR paradigm beats most-popular": holds where every paradigm's interval lies above 0; coverage,
        # bias and MDE per paradigm
        each = [r["t2_each"] for r in runs if r.get("t2_each")]
        holds = mcse_rate(np.array([all(interval_holds(finding, x) for x in e.values())
                                    for e in each]))
        for par, popv in (pop.get("t2_each") or {}).items():
            pr = [e[par] for e in each if par in e and e[par][1] is not None]
            tv = as_float(popv.get("value"))
            parts[par] = {"population": tv, "coverage": asdict(mcse_rate(np.array([as_float(x[1]) <= tv <= as_float(x[2])
                                                                                   for x in pr]))),
                          "bias": asdict(mcse_bias([as_float(x[0]) for x in pr], tv)), "mde": _interval_mde(pr, level, power)}
    cov_rate = mcse_rate(np.array([as_float(x[1]) <= truth <= as_float(x[2]) for x in rows])) if rows and math.isfinite(truth) else None
    b = mcse_bias([as_float(x[0]) for x in rows], truth) if rows else None
    is_null = math.isfinite(truth) and _claim_false(finding, truth, null, _null_tolerance(finding, pop))
    res = FindingCalibration(finding, size, truth, is_null, holds, cov_rate, b, _interval_mde(rows, level, power), len(rows),
                             parts)
    if finding == "t2_popular" and own is not None:
        _own_world_coverage(res, runs, own, level)
    return res


def interval_holds(finding: str, row: list[Any]) -> bool:
    """The report's verdict on one interval ``[estimate, low, high, ...]`` of ``t4_rho`` (holds below 0) or
    ``t2_popular`` (holds above 0)."""
    return verdict(as_float(row[1]), as_float(row[2]), "less" if finding == "t4_rho" else "greater") == HOLDS


def all_users_intervals(run: dict[str, Any]) -> list[list[Any]]:
    """A replicate's all-users lambda* ``[estimate, low, high, n]`` per domain, those with an interval."""
    return [x for x in (v.get("all") for v in (run.get("lambda_star") or {}).values())
            if x is not None and x[1] is not None and x[2] is not None]


def some_pair_disjoint(intervals: list[list[Any]]) -> bool:
    """The report's rule for "the best lambda differs between domains": some pair of ``[_, low, high, ...]``
    intervals does not overlap."""
    return any(as_float(a[2]) < as_float(b[1]) or as_float(b[2]) < as_float(a[1])
               for i, a in enumerate(intervals) for b in intervals[i + 1:])


def _f5_varies(size: float, runs: list[dict[str, Any]], truth: float, level: float, power: float
               ) -> FindingCalibration:
    """"The best lambda differs between domains", judged as the report judges it (study_results: some pair of
    domains' 95% all-users lambda* intervals are disjoint) on each replicate's stored intervals. The estimate is
    the largest pairwise difference of the domains' lambda*; the MDE is that of a pair's difference, whose SE is
    sqrt(se_a^2 + se_b^2) for independent domains (the report's own MDE for this finding)."""
    holds, est, pairs = [], [], []
    for r in runs:
        al = all_users_intervals(r)
        if len(al) < 2:
            continue
        lo, hi, pt = ([as_float(x[i]) for x in al] for i in (1, 2, 0))
        holds.append(some_pair_disjoint(al))
        est.append(max(pt) - min(pt))
        pairs += [[0.0, -math.hypot(hi[i] - lo[i], hi[j] - lo[j]) / 2, math.hypot(hi[i] - lo[i], hi[j] - lo[j]) / 2]
                  for i in range(len(al)) for j in range(i + 1, len(al))]
    rate = mcse_rate(np.array(holds)) if holds else None
    b = mcse_bias(est, truth) if est and math.isfinite(truth) else None
    return FindingCalibration("f5_varies", size, truth, math.isfinite(truth) and abs(truth) < 1e-9, rate, None, b,
                              _interval_mde(pairs, level, power), len(holds))


def _check_aligned(runs: list[dict[str, Any]], own: list[dict[str, Any] | None]) -> None:
    if len(own) != len(runs):
        raise ValueError(f"own-world runs: {len(own)} for {len(runs)} replicates; they must be aligned")


def _against_own_world(runs: list[dict[str, Any]], own: list[dict[str, Any] | None], get: Any, level: float,
                       tol: float = 0.0) -> dict[str, Any] | None:
    """One estimate's intervals (``get(run)``: ``[estimate, low, high, ...]``) against each replicate's own world's
    value (``get(own[i])``): per pair, covered (within ``tol``) and the coverage to expect from the own-world
    value's noise; the bias and the own-world values' mean. None where no replicate has both."""
    pairs = [(get(r), get(o)) for r, o in zip(runs, own) if o is not None]
    pairs = [(x, w) for x, w in pairs if x and w and x[1] is not None and math.isfinite(as_float(w[0]))]
    if not pairs:
        return None
    hits = [as_float(x[1]) - tol <= as_float(w[0]) <= as_float(x[2]) + tol for x, w in pairs]
    exp = [e for x, w in pairs for e in _expected_coverage(
        [se_from_interval(as_float(x[1]), as_float(x[2]), level)],
        se_from_interval(as_float(w[1]), as_float(w[2]), level) if w[1] is not None else float("nan"), level)]
    return {"hits": hits, "expected_each": exp, "coverage": mcse_rate(np.array(hits)),
            "bias": mcse_bias([as_float(x[0]) - as_float(w[0]) for x, w in pairs], 0.0),
            "expected": float(np.mean(exp)) if exp else float("nan"),
            "population": float(np.mean([as_float(w[0]) for _, w in pairs]))}


def _own_world_coverage(res: FindingCalibration, runs: list[dict[str, Any]], own: list[dict[str, Any] | None],
                        level: float) -> None:
    """Coverage and bias of the Table 2 intervals against each replicate's own world's value (``own[i]``: the
    population run of replicate i's world), overall and per paradigm; and the coverage to expect from the own-world
    values' own noise (a correct interval covers a noisy target less often than ``level``)."""
    _check_aligned(runs, own)
    m = _against_own_world(runs, own, lambda r: r.get("t2_popular"), level)
    if m is not None:
        res.coverage_config = res.coverage
        res.coverage, res.bias, res.coverage_expected = m["coverage"], m["bias"], m["expected"]
        res.coverage_of = "own world"
    for par, part in res.per_domain.items():
        pm = _against_own_world(runs, own, lambda r, par=par: (r.get("t2_each") or {}).get(par), level)
        if pm is not None:
            part.update({"coverage": asdict(pm["coverage"]), "bias": asdict(pm["bias"]), "coverage_of": "own world",
                         "coverage_expected": pm["expected"], "own_world_mean": pm["population"]})


def _own_world_lambda(res: FindingCalibration, runs: list[dict[str, Any]], own: list[dict[str, Any] | None],
                      level: float) -> None:
    """Coverage and bias of each domain's non-active lambda* intervals against each replicate's own world's
    lambda* (``own[i]``: the own-world run of replicate i, with its temporal sweep), overall and per domain, and
    the coverage to expect from the own-world values' own noise. The configuration's coverage (over world seeds)
    stays beside it (``coverage_config``)."""
    _check_aligned(runs, own)
    hits, expected = [], []
    for d, part in res.per_domain.items():
        m = _against_own_world(runs, own, lambda r, d=d: (r.get("lambda_star") or {}).get(d, {}).get("non_active"),
                               level, tol=1e-9)
        if m is None:
            continue
        hits += m["hits"]
        expected += m["expected_each"]
        part.update({"coverage_config": part["coverage"], "coverage": asdict(m["coverage"]),
                     "coverage_of": "own world", "coverage_expected": m["expected"], "bias": asdict(m["bias"]),
                     "own_world_mean": m["population"]})
    if hits:
        res.coverage_config = res.coverage
        res.coverage = mcse_rate(np.array(hits))
        res.coverage_of = "own world"
        res.coverage_expected = float(np.mean(expected)) if expected else float("nan")


_N = NormalDist()


def _expected_coverage(se_r: list[float], se_p: float, level: float) -> list[float]:
    """Per interval, the rate at which a correct ``level`` interval with SE ``se_r`` covers a target that is itself
    estimated with SE ``se_p``: 2 Phi(z se_r / sqrt(se_r^2 + se_p^2)) - 1 (independent errors); empty where
    ``se_p`` is unknown."""
    if not math.isfinite(se_p):
        return []
    z = _Z(level)
    return [2 * _N.cdf(z * s / math.sqrt(s * s + se_p * se_p)) - 1 for s in se_r if math.isfinite(s) and s > 0]


def _Z(level: float) -> float:
    return _N.inv_cdf((1.0 + level) / 2.0)


def _claim_false(finding: str, truth: float, null: float, tol: float) -> bool:
    """Whether the population value makes the finding's one-sided claim false, so that a "holds" is a type-I
    error: Table 2's "beats most-popular" where the difference is at most 0 (within ``tol``; a paradigm worse than
    the baseline is no effect of the kind claimed either), Table 4's "rho < 0" where rho is at least 0."""
    if finding == "t4_rho":
        return truth >= null - tol
    return truth <= null + tol


def _null_tolerance(finding: str, pop: dict[str, Any]) -> float:
    """How close to its null a population value must be to count as "no effect": rho exactly 0 (the null world
    has alike domains), a difference within 2 SE of the population runs."""
    if finding == "t2_popular":
        se = as_float(pop.get("t2_popular_se"))
        return 2 * se if math.isfinite(se) else 0.0
    return 1e-9



def target_check(f: FindingCalibration, alpha: float = 0.05, power: float = 0.8, level: float = 0.95) -> str:
    """The issue's targets for one row: type-I error <= alpha + 2 MCSE under the null, power >= ``power``
    otherwise, coverage within ``level`` +- 2 MCSE (MCSE at the nominal rate); "-" where none applies."""
    out = []
    if f.holds is not None and f.holds.n:
        if f.is_null:
            out.append(f"type-I {'ok' if within_mcse(f.holds, alpha, 2.0) else 'too high'}")
        elif math.isfinite(f.population) and f.population != FINDINGS[f.finding][3]:
            out.append(f"power {'ok' if f.holds.rate >= power else 'below ' + format(power, '.0%')}")
    if f.coverage is not None and f.coverage.n:
        se = math.sqrt(level * (1 - level) / f.coverage.n)
        lo = level - 2 * se
        text = "ok" if lo <= f.coverage.rate <= level + 2 * se else ("below 90%" if f.coverage.rate < 0.9 else "low")
        e = f.coverage_expected
        if text != "ok" and math.isfinite(e):
            # a correct interval against a noisy target covers at e, not at level: within 2 MCSE of e it is the
            # target's noise (a larger population would remove it), beyond it the interval's own defect
            near = f.coverage.rate >= e - 2 * math.sqrt(e * (1 - e) / f.coverage.n)
            whose = "the own-world value's" if f.coverage_of == "own world" else "the population value's"
            text += (f", within 2 MCSE of the {e:.0%} {whose} own noise allows" if near
                     else f", below the {e:.0%} {whose} own noise allows: a defect")
        elif text == "below 90%":
            text += ": a defect"
        out.append("coverage " + text)
    return ", ".join(out) or "-"
