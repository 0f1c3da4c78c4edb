"""Figure 2 (task-vector L1 norms) and the pairwise conflict diagnostics, from the registry.

    python analysis/figure2_diagnostics.py CONFIG [KEY=VALUE ...] --out DIR
"""

import argparse

from mmgrid.sweep.diagnose import pairwise_diagnostics, task_vector_norms
from mmgrid.sweep.figures import figure2_norms
from mmgrid.sweep.results import open_grid

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("config")
ap.add_argument("overrides", nargs="*")
ap.add_argument("--out", default=".")
a = ap.parse_args()
cfg, reg, prepared = open_grid(a.config, a.overrides)
norms = task_vector_norms(cfg, reg, prepared)
print(norms.drop(columns=["id", "base_id"]).to_string())
print(pairwise_diagnostics(cfg, reg, prepared).drop(columns=["id_i", "id_j", "base_i", "base_j"]).to_string())
print(figure2_norms(norms, f"{a.out}/figure2_norms.png"))
