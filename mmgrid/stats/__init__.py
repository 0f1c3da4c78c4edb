"""Statistics for findings with error bars (issue 17): pure numpy / scipy functions on arrays.

Foundation layer: imports numpy and scipy only, nothing of mmgrid above it. Per-user metric
values are arrays ``[n_users]`` (one evaluation) or ``[n_seeds, n_users]`` (the same users
evaluated on every training seed's replicate, aligned by column); per-user lambda curves are
``[n_seeds, n_lambdas, n_users]``. docs/studies.md ("Statistics") says what each function
resamples and tests.
"""

from mmgrid.stats.association import (LooResult, SpearmanResult, loo_error_vs_default, loo_predictions,
                                      spearman_exact_p, spearman_rho, spearman_with_interval)
from mmgrid.stats.bootstrap import mean_ci, percentile_interval, resample_weights
from mmgrid.stats.errors import StatsError
from mmgrid.stats.lambda_star import (LambdaStar, argmax_lambda, curve_band, domains_lambda_star_replicates,
                                      lambda_star_replicates, robust_lambda_star, seed_averaged_curve, smooth_curve)
from mmgrid.stats.multiple import benjamini_hochberg, holm
from mmgrid.stats.paired import PairedResult, paired_difference
from mmgrid.stats.verdict import FAILS, HOLDS, INCONCLUSIVE, contains, verdict, verdict_line

__all__ = [
    "StatsError", "mean_ci", "percentile_interval", "resample_weights",
    "PairedResult", "paired_difference",
    "holm", "benjamini_hochberg",
    "LambdaStar", "robust_lambda_star", "lambda_star_replicates", "domains_lambda_star_replicates",
    "argmax_lambda", "curve_band", "seed_averaged_curve", "smooth_curve",
    "SpearmanResult", "spearman_rho", "spearman_exact_p", "spearman_with_interval",
    "LooResult", "loo_predictions", "loo_error_vs_default",
    "verdict", "contains", "verdict_line", "HOLDS", "FAILS", "INCONCLUSIVE",
]
