"""Figure 2 (task-vector L1 norms) and the pairwise conflict diagnostics, from the registry: the same
tables and figure as report.md's section.

    python analysis/figure2_diagnostics.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.render.report import section_markdown
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.study_results import diagnostics_results

a, cfg, reg, prepared = script_grid(__doc__)
print(section_markdown("diagnostics", diagnostics_results(cfg, reg, prepared), a.out))
