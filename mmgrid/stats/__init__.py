"""Statistics for findings with error bars: pure numpy / scipy functions on arrays.

Foundation layer: imports numpy and scipy (``signs``: torch, for tensors), nothing of mmgrid above it. Per-user metric
values are arrays ``[n_users]`` (one evaluation) or ``[n_seeds, n_users]`` (the same users
evaluated on every training seed's replicate, aligned by column); per-user lambda curves are
``[n_seeds, n_lambdas, n_users]``. docs/studies.md ("Statistics") says what each function
resamples and tests.

The modules that need scipy load on first use of one of their names (PEP 562), so that importing
``mmgrid.stats`` (the registry does, for ``mean_ci``) keeps ``mmgrid --help`` free of scipy.
"""

from importlib import import_module
from typing import Any

from mmgrid.stats.bootstrap import mean_ci, percentile_interval, resample_counts, resample_weights
from mmgrid.stats.errors import StatsError
from mmgrid.stats.verdict import FAILS, HOLDS, INCONCLUSIVE, contains, mde_note, verdict, verdict_line

_LAZY = {
    "mmgrid.stats.association": ("LooResult", "SpearmanResult", "loo_error_vs_default", "rank_correlation", "spearman_exact_p", "spearman_rho", "spearman_with_interval"),
    "mmgrid.stats.lambda_star": ("LambdaStar", "argmax_lambda", "curve_band", "domains_lambda_star_replicates",
                                 "lambda_star_replicates", "robust_lambda_star", "seed_averaged_curve", "smooth_curve"),
    "mmgrid.stats.regression": ("LinearFit", "fit_ols", "loo_predictions", "ols"),
    "mmgrid.stats.multiple": ("benjamini_hochberg", "holm"),
    "mmgrid.stats.paired": ("PairedResult", "paired_difference", "sign_flip_p"),
    "mmgrid.stats.grouped": ("grouped_difference", "grouped_mean_ci"),
    "mmgrid.stats.power": ("Bias", "DesignPoint", "Rate", "mcse_bias", "mcse_rate", "mde", "mde_design",
                           "mde_from_interval", "mde_paired", "n_for_effect", "plan_design", "power_normal",
                           "se_from_interval", "t_power", "within_mcse"),
}
_WHERE = {name: mod for mod, names in _LAZY.items() for name in names}

__all__ = ["StatsError", "mean_ci", "percentile_interval", "resample_counts", "resample_weights",
           "verdict", "contains", "verdict_line", "mde_note", "HOLDS", "FAILS", "INCONCLUSIVE", *_WHERE]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'mmgrid.stats' has no attribute {name!r}")
    value = getattr(import_module(mod), name)  # lazy: scipy (~0.3-1 s) only when a statistic is used
    globals()[name] = value
    return value
