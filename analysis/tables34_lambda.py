"""Tables 3 and 4 and the lambda* regression (Spearman's rho with its interval, the leave-one-out error),
from the registry: the same tables and figure as report.md's section (fitted once, on Figure 5's lambda*).

    python analysis/tables34_lambda.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.render.report import section_markdown
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.study_results import prediction, run_section, temporal

a, cfg, reg, prepared = script_grid(__doc__)
fig5 = run_section("temporal", "Figure 5", lambda: temporal(cfg, reg), keep_going=False)
print(section_markdown("prediction", prediction(cfg, reg, prepared, fig5), a.out))
