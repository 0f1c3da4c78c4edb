"""Orbit Pareto plot: text retention against Recall@10 (%) per variant (none, l2_init, soup_to_go, orbit),
with 95% intervals, from the registry: the same table and figure as report.md's section.

    python analysis/orbit_pareto.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.render.report import section_markdown
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.study_results import pareto

a, cfg, reg, _ = script_grid(__doc__)
print(section_markdown("pareto", pareto(cfg, reg), a.out))
