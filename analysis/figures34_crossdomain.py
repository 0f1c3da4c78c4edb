"""Figures 3 (heatmaps) and 4 (alpha curves per base, 95% error bars) of the cross-domain study and its
tables, from the registry: the same as report.md's section (another metric: sweeps.cross_domain.metric=...).

    python analysis/figures34_crossdomain.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.render.report import section_markdown
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.study_results import cross_domain

a, cfg, reg, _ = script_grid(__doc__)
print(section_markdown("cross_domain", cross_domain(cfg, reg), a.out))
