"""Statistics for findings with error bars (issue 17): pure numpy / scipy functions on arrays.

Foundation layer: imports numpy and scipy only, nothing of mmgrid above it. Per-user metric
values are arrays ``[n_users]`` (one evaluation) or ``[n_seeds, n_users]`` (the same users
evaluated on every training seed's replicate, aligned by column).
"""

from mmgrid.stats.bootstrap import mean_ci

__all__ = ["mean_ci"]
