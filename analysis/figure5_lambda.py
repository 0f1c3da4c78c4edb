"""Figure 5: temporal lambda curves with their 95% bands and lambda* per user group with its interval,
from the registry: the same table and figure as report.md's section.

    python analysis/figure5_lambda.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.render.report import section_markdown
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.study_results import temporal

a, cfg, reg, _ = script_grid(__doc__)
print(section_markdown("temporal", temporal(cfg, reg), a.out))
