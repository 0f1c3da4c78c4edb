"""Power, minimum detectable effects, sample sizes and Monte Carlo standard errors.

What a study of a given size can see, and how precisely a simulation study measures its own
performance:

* **Monte Carlo standard errors** of a simulation study's performance measures (Morris, White &
  Crowther, "Using simulation studies to evaluate statistical methods", Stat Med 2019, Table 6):
  a rate estimated from ``R`` replicates (type-I error, power, coverage) has
  MCSE = sqrt(rate (1 - rate) / R); a bias (mean of estimate - truth) has MCSE = SD / sqrt(R).
* **Minimum detectable effect (MDE)** of a two-sided level-alpha test whose estimate has standard
  error ``se``: the true effect it detects with probability ``power``. With the normal
  approximation that ignores the far tail, MDE = (z_{1-alpha/2} + z_{power}) se (2.80 se at 5% and
  80%); :func:`mde` can also solve the exact two-tail power equation
  Phi(d/se - z) + Phi(-d/se - z) = power. The ``se`` of a reported effect comes from its 95%
  interval: se = (high - low) / (2 z_{0.975}) (:func:`se_from_interval`), so every inconclusive
  verdict can say what its run could have seen.
* **Sample sizes** (the inverse): users needed for a paired per-user difference of SD ``sd_user``
  (n = ((z_{1-alpha/2} + z_power) sd / effect)^2, or exactly with the noncentral t of the paired
  t-test), and a two-stage design planner where the mean over ``n_seeds`` training seeds adds a
  seed variance: Var = sd_user^2 / n_users + sd_seed^2 / n_seeds (:func:`plan_design`).

numpy / scipy only (foundation layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from mmgrid.stats.errors import StatsError

_N = NormalDist()
DEFAULT_ALPHA = 0.05
DEFAULT_POWER = 0.8


def _check_prob(name: str, v: float) -> None:
    if not 0.0 < float(v) < 1.0:
        raise StatsError(f"{name} must lie strictly between 0 and 1, got {v}")


def z_sum(alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """z_{1-alpha/2} + z_{power}: 2.8016 at alpha 0.05 and power 0.8."""
    _check_prob("alpha", alpha)
    _check_prob("power", power)
    return _N.inv_cdf(1.0 - alpha / 2.0) + _N.inv_cdf(power)


# --------------------------------------------------------------------------- Monte Carlo standard errors


@dataclass(frozen=True)
class Rate:
    """A rate over ``n`` simulation replicates with its Monte Carlo standard error."""

    hits: int
    n: int
    rate: float
    mcse: float

    def text(self, digits: int = 0) -> str:
        """``"85% (MCSE 8%, 17/20)"``."""
        if self.n == 0:
            return "- (no replicates)"
        return f"{100 * self.rate:.{digits}f}% (MCSE {100 * self.mcse:.{digits}f}%, {self.hits}/{self.n})"


def mcse_rate(hits, n: int | None = None) -> Rate:
    """A rate (type-I error, power, coverage) with MCSE sqrt(p (1 - p) / n) (Morris et al. 2019, Table 6).

    Args:
        hits: the number of replicates where the event happened, or a boolean array of them (NaN-free).
        n: the number of replicates (omit when ``hits`` is an array).
    """
    if n is None:
        a = np.asarray(hits, dtype=bool).ravel()
        hits, n = int(a.sum()), int(a.size)
    hits, n = int(hits), int(n)
    if n < 0 or hits < 0 or hits > n:
        raise StatsError(f"a rate needs 0 <= hits <= n, got {hits} of {n}")
    if n == 0:
        return Rate(0, 0, float("nan"), float("nan"))
    p = hits / n
    return Rate(hits, n, p, math.sqrt(p * (1.0 - p) / n))


@dataclass(frozen=True)
class Bias:
    """Mean of estimate - truth over replicates with its MCSE (SD / sqrt(n)) and the empirical SE of the estimate."""

    bias: float
    mcse: float
    emp_se: float  # SD of the estimates over replicates
    n: int


def mcse_bias(estimates, truth: float) -> Bias:
    """Bias of ``estimates`` against ``truth`` (non-finite estimates dropped) with its MCSE."""
    e = np.asarray(estimates, dtype=np.float64).ravel()
    e = e[np.isfinite(e)]
    if e.size == 0 or not math.isfinite(float(truth)):
        return Bias(float("nan"), float("nan"), float("nan"), int(e.size))
    sd = float(e.std(ddof=1)) if e.size > 1 else float("nan")
    return Bias(float(e.mean() - truth), sd / math.sqrt(e.size) if e.size > 1 else float("nan"), sd, int(e.size))


def within_mcse(rate: Rate, target: float, k: float = 2.0) -> bool:
    """Whether ``rate`` is at most ``target + k MCSE`` (the issue's "<= 5% + 2 MCSE"), MCSE at the target
    rate (so a rate of 0 out of few replicates is not judged on an MCSE of 0)."""
    if rate.n == 0:
        return False
    se = math.sqrt(target * (1.0 - target) / rate.n)
    return rate.rate <= target + k * se


# --------------------------------------------------------------------------- power and MDE


def power_normal(effect: float, se: float, alpha: float = DEFAULT_ALPHA) -> float:
    """Power of a two-sided level-``alpha`` z-test when the true effect is ``effect`` and the estimate's SE ``se``:
    Phi(|effect| / se - z) + Phi(-|effect| / se - z), z = z_{1 - alpha / 2}."""
    _check_prob("alpha", alpha)
    if not se > 0:
        raise StatsError(f"a standard error must be positive, got {se}")
    z = _N.inv_cdf(1.0 - alpha / 2.0)
    d = abs(float(effect)) / float(se)
    return _N.cdf(d - z) + _N.cdf(-d - z)


def mde(se: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER, exact: bool = False) -> float:
    """Minimum detectable |effect| at ``power`` of a two-sided level-``alpha`` test with standard error ``se``.

    ``exact=False``: (z_{1-alpha/2} + z_power) se (the far tail ignored; 2.80 se at 5% / 80%).
    ``exact=True``: the root of :func:`power_normal` = ``power`` (both tails; differs by < 1e-3 se when
    power >= 0.5). NaN for a non-finite or non-positive ``se``.
    """
    if se is None or not math.isfinite(float(se)) or float(se) <= 0:
        return float("nan")
    approx = z_sum(alpha, power) * float(se)
    if not exact:
        return approx
    # lazy: scipy (~0.3 s) only for the exact root
    from scipy.optimize import brentq

    return float(brentq(lambda d: power_normal(d, se, alpha) - power, 0.0, approx + 10 * float(se), xtol=1e-12))


def se_from_interval(ci_low: float, ci_high: float, level: float = 0.95) -> float:
    """The standard error a (roughly normal) ``level`` interval implies: width / (2 z_{(1+level)/2})."""
    _check_prob("level", level)
    if not (math.isfinite(float(ci_low)) and math.isfinite(float(ci_high))) or ci_high < ci_low:
        return float("nan")
    return (float(ci_high) - float(ci_low)) / (2.0 * _N.inv_cdf((1.0 + level) / 2.0))


def mde_from_interval(ci_low: float, ci_high: float, level: float = 0.95, alpha: float | None = None,
                      power: float = DEFAULT_POWER) -> float:
    """MDE at ``power`` of the effect whose ``level`` interval is [ci_low, ci_high] (alpha = 1 - level by default)."""
    alpha = 1.0 - level if alpha is None else alpha
    return mde(se_from_interval(ci_low, ci_high, level), alpha, power)


def mde_paired(differences, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER, clusters=None) -> float:
    """MDE of a mean paired per-user difference from its observed per-user differences.

    ``differences``: ``[n_users]`` or ``[n_seeds, n_users]`` (seeds averaged first, as the paired tests do).
    ``clusters``: the user of each column (one user's test examples are averaged into one unit).
    se = SD(per-user differences) / sqrt(n_users).
    """
    d = np.asarray(differences, dtype=np.float64)
    d = d.mean(axis=0) if d.ndim == 2 else d.ravel()
    if clusters is not None:
        _, inv = np.unique(np.asarray(clusters).ravel(), return_inverse=True)
        d = np.bincount(inv, weights=d) / np.bincount(inv)
    if d.size < 2:
        return float("nan")
    return mde(float(d.std(ddof=1)) / math.sqrt(d.size), alpha, power)


# --------------------------------------------------------------------------- sample sizes


def n_for_effect(effect: float, sd: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER,
                 test: str = "z") -> int:
    """Users needed for a paired per-user difference of mean ``effect`` and per-user SD ``sd``.

    ``test="z"``: ceil(((z_{1-alpha/2} + z_power) sd / effect)^2). ``test="t"``: the smallest n whose paired
    t-test (n - 1 degrees of freedom, noncentrality effect sqrt(n) / sd) reaches ``power`` (both tails,
    scipy.stats.nct), e.g. 34 for effect / sd = 0.5 at 5% and 80% (Cohen 1988, Table 2.4.1).
    """
    if not effect or not math.isfinite(float(effect)):
        raise StatsError(f"the effect must be a non-zero number, got {effect}")
    if not sd > 0:
        raise StatsError(f"the per-user SD must be positive, got {sd}")
    ratio = abs(float(effect)) / float(sd)
    n = max(2, math.ceil((z_sum(alpha, power) / ratio) ** 2))
    if test == "z":
        return n
    if test != "t":
        raise StatsError(f"test {test!r} is not 'z' or 't'")
    while t_power(ratio, n, alpha) < power:
        n += 1
    while n > 2 and t_power(ratio, n - 1, alpha) >= power:
        n -= 1
    return n


def t_power(effect_over_sd: float, n: int, alpha: float = DEFAULT_ALPHA) -> float:
    """Power of the two-sided one-sample (paired) t-test with ``n`` units at standardized effect ``effect / sd``."""
    # lazy: scipy (~0.3 s) only when the t-test's power is asked for
    from scipy import stats as sps

    df = n - 1
    tc = sps.t.ppf(1.0 - alpha / 2.0, df)
    nc = abs(effect_over_sd) * math.sqrt(n)
    return float(sps.nct.sf(tc, df, nc) + sps.nct.cdf(-tc, df, nc))


@dataclass(frozen=True)
class DesignPoint:
    """One row of a design plan: with ``n_seeds`` seeds, ``n_users`` test users reach ``power`` (None: never)."""

    n_seeds: int
    n_users: int | None
    se: float  # the mean's SE at that design (NaN when unreachable)
    mde: float  # what that design detects at the plan's power (= |effect| where reachable)


def plan_design(effect: float, sd_user: float, sd_seed: float = 0.0, seeds: tuple[int, ...] = (1, 2, 3, 5, 10),
                alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER, max_users: int = 10**9) -> list[DesignPoint]:
    """Test users needed per number of training seeds to detect ``effect`` at ``power`` (two-sided z).

    The mean over users and seeds of a paired difference has Var = sd_user^2 / n_users + sd_seed^2 / n_seeds
    (seed-to-seed spread of a replicate's mean, ``sd_seed``). Its SE must reach |effect| / (z_{1-alpha/2} +
    z_power); when the seeds alone exceed that (sd_seed^2 / n_seeds >= the allowed variance), no number of
    users suffices and ``n_users`` is None.
    """
    if not effect or not math.isfinite(float(effect)):
        raise StatsError(f"the effect must be a non-zero number, got {effect}")
    if not sd_user > 0 or sd_seed < 0:
        raise StatsError(f"sd_user must be > 0 and sd_seed >= 0, got {sd_user}, {sd_seed}")
    allowed = (abs(float(effect)) / z_sum(alpha, power)) ** 2
    out = []
    for s in seeds:
        if int(s) < 1:
            raise StatsError(f"a design needs at least one seed, got {s}")
        left = allowed - sd_seed ** 2 / s
        if left <= 0:
            out.append(DesignPoint(int(s), None, float("nan"), mde(sd_seed / math.sqrt(s), alpha, power)))
            continue
        n = math.ceil(sd_user ** 2 / left)
        if n > max_users:
            out.append(DesignPoint(int(s), None, float("nan"), float("nan")))
            continue
        se = math.sqrt(sd_user ** 2 / n + sd_seed ** 2 / s)
        out.append(DesignPoint(int(s), int(n), se, mde(se, alpha, power)))
    return out


def mde_design(n_users: int, n_seeds: int, sd_user: float, sd_seed: float = 0.0, alpha: float = DEFAULT_ALPHA,
               power: float = DEFAULT_POWER) -> float:
    """MDE of a design with ``n_users`` users and ``n_seeds`` seeds (the forward question of :func:`plan_design`)."""
    if n_users < 1 or n_seeds < 1:
        raise StatsError(f"a design needs users and seeds, got {n_users} users and {n_seeds} seeds")
    return mde(math.sqrt(sd_user ** 2 / n_users + sd_seed ** 2 / n_seeds), alpha, power)
