"""Orbit Pareto plot: text retention against Recall@10 per variant (none, l2_init, soup_to_go, orbit).

    python analysis/orbit_pareto.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.sweep.figures import pareto_orbit
from mmgrid.sweep.report import pareto_points
from mmgrid.sweep.results import script_grid

a, cfg, reg, _ = script_grid(__doc__)
pts = pareto_points(cfg, reg)
print(pts.drop(columns=["ids"]).to_string())
if not pts.empty:
    print(pareto_orbit(pts, f"{a.out}/orbit_pareto.png"))
