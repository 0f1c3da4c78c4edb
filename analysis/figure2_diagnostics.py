"""Figure 2 (task-vector L1 norms) and the pairwise conflict diagnostics, from the registry.

    python analysis/figure2_diagnostics.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.sweep.diagnose import pairwise_diagnostics, task_vector_norms
from mmgrid.sweep.figures import figure2_norms
from mmgrid.sweep.results import script_grid

a, cfg, reg, prepared = script_grid(__doc__)
norms = task_vector_norms(cfg, reg, prepared)
print(norms.drop(columns=["id", "base_id"]).to_string())
print(pairwise_diagnostics(cfg, reg, prepared).drop(columns=["id_i", "id_j", "base_i", "base_j"]).to_string())
print(figure2_norms(norms, f"{a.out}/figure2_norms.png"))
