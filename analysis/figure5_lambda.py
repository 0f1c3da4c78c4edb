"""Figure 5: temporal lambda curves with lambda* per user group, from the registry.

    python analysis/figure5_lambda.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.sweep.figures import figure5_lambda
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.selection import lambda_stars
from mmgrid.sweep.temporal import temporal_results

a, cfg, reg, _ = script_grid(__doc__)
t = cfg.sweeps.temporal
res = temporal_results(reg, paradigm=t.paradigm, variant=t.variant)
stars = lambda_stars(res, t.metric)
print(stars.pivot(index="domain", columns="group", values="lambda_star"))
print(figure5_lambda(res, stars, f"{a.out}/figure5_lambda.png", t.metric))
