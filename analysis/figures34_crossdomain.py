"""Figures 3 (heatmaps) and 4 (alpha curves per base) of the cross-domain study, from the registry.

    python analysis/figures34_crossdomain.py CONFIG [KEY=VALUE ...] --out DIR
"""

import numpy as np

from mmgrid.sweep.crossdomain import cross_domain_results, relative_change
from mmgrid.sweep.figures import figure3_heatmaps, figure4_alpha
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.tables import cross_domain_table, markdown_table

a, cfg, reg, _ = script_grid(__doc__, lambda p: p.add_argument("--metric", default="ndcg@10"))
rel = relative_change(cross_domain_results(reg), metric=a.metric)
rel["alpha"] = rel["alpha"].astype(float)
heat = rel[rel["base_kind"].isin(["original", "none"]) & (rel["alpha"].isna() | np.isclose(rel["alpha"], 0.5))]
print(markdown_table(cross_domain_table(rel)[0], "{:+.2f}"))
print(figure3_heatmaps(heat, f"{a.out}/figure3_heatmaps.png"))
print(figure4_alpha(rel, f"{a.out}/figure4_alpha.png"))
