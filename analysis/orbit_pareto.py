"""Orbit Pareto plot: text retention against Recall@10 per variant (none, l2_init, soup_to_go, orbit).

    python analysis/orbit_pareto.py CONFIG [KEY=VALUE ...] --out DIR
"""

import argparse

from mmgrid.sweep.figures import pareto_orbit
from mmgrid.sweep.report import pareto_points
from mmgrid.sweep.results import open_grid

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("config")
ap.add_argument("overrides", nargs="*")
ap.add_argument("--out", default=".")
a = ap.parse_args()
cfg, reg, _ = open_grid(a.config, a.overrides)
pts = pareto_points(cfg, reg)
print(pts.drop(columns=["ids"]).to_string())
if not pts.empty:
    print(pareto_orbit(pts, f"{a.out}/orbit_pareto.png"))
