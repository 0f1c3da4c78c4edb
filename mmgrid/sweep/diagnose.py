"""Task-vector diagnostics over the grid (MMGRid Figure 2 and section 4.2).

For every paradigm x domain x period, the L1 norm of tau = theta - theta_0 against the
paradigm's start model (:mod:`mmgrid.sweep.start_models`); for every pair of domains, the sign
dissimilarity, cosine and GCWM geometry conflict between their t2 task vectors. The math
is in :mod:`mmgrid.eval.diagnostics`; this module only reads the registry.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.eval.diagnostics import cosine, geometry_conflict, norms, sign_dissimilarity, task_vector
from mmgrid.eval.table import planned_rows
from mmgrid.runtime.plan import planned_ids
from mmgrid.sweep.start_models import start_model_id

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset

NORM_COLUMNS = ["paradigm", "domain", "period", "l1", "l2", "mean_abs", "numel", "id", "base_id"]
PAIR_COLUMNS = ["paradigm", "domain_i", "domain_j", "cosine", "sign_dissimilarity", "geometry_conflict",
                "id_i", "id_j", "base_i", "base_j"]


def _trained(registry: Registry, paradigm: str, variant: str, seed: int | None = None,
             planned: set[str] | None = None) -> pd.DataFrame:
    """The trained checkpoints of a row, one per (domain, period): the first training seed's
    replicate (with ``train.shared_stages`` its shared stages carry that seed too), else the newest;
    a planned id (``planned``, the grid's) wins over other checkpoints with the same coordinates."""
    ck = registry.query(paradigm=paradigm, variant=variant, kind="trained")
    if ck.empty:
        return ck
    if seed is not None and "seed" in ck.columns and (ck["seed"] == seed).any():
        ck = ck[ck["seed"] == seed]
    return planned_rows(ck, ["domain", "period"], planned)


def task_vector_norms(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", paradigms: list[str] | None = None,
                      variant: str = "default") -> pd.DataFrame:
    """L1 (and L2, mean |.|) of every trained checkpoint's task vector (Figure 2)."""
    rows = []
    for paradigm in paradigms or list(cfg.paradigms):
        ck = _trained(registry, paradigm, variant, cfg.train.seed, _planned(cfg, registry))
        bases: dict[str, tuple[str, dict]] = {}
        for _, r in ck.iterrows():
            if r["domain"] not in bases:
                bid = start_model_id(cfg, registry, prepared, paradigm, r["domain"], variant, r["id"])
                bases[r["domain"]] = (bid, registry.load(bid))
            bid, base = bases[r["domain"]]
            n = norms(task_vector(registry.load(r["id"]), base))
            rows.append({"paradigm": paradigm, "domain": r["domain"], "period": r["period"], **n, "id": r["id"],
                         "base_id": bid})
    return pd.DataFrame(rows, columns=NORM_COLUMNS)


def pairwise_diagnostics(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", paradigms: list[str] | None = None,
                         variant: str = "default", rank: int | None = 16) -> pd.DataFrame:
    """Sign dissimilarity, cosine and geometry conflict between domains' last-stage task vectors."""
    last = cfg.train.stages[-1]
    rows = []
    for paradigm in paradigms or list(cfg.paradigms):
        ck = _trained(registry, paradigm, variant, cfg.train.seed, _planned(cfg, registry))
        ck = ck[ck["period"] == last].set_index("domain")["id"].to_dict()
        tvs, base_ids = {}, {}
        for d, cid in ck.items():
            base_ids[d] = start_model_id(cfg, registry, prepared, paradigm, d, variant, cid)
            tvs[d] = task_vector(registry.load(cid), registry.load(base_ids[d]))
        for di, dj in itertools.combinations(sorted(tvs), 2):
            a, b = tvs[di], tvs[dj]
            rows.append({"paradigm": paradigm, "domain_i": di, "domain_j": dj, "cosine": cosine(a, b),
                         "sign_dissimilarity": sign_dissimilarity(a, b),
                         "geometry_conflict": geometry_conflict(a, b, rank=rank)["__mean__"],
                         "id_i": ck[di], "id_j": ck[dj], "base_i": base_ids[di], "base_j": base_ids[dj]})
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def _planned(cfg: GridConfig, registry: Registry) -> set[str] | None:
    plan = planned_ids(cfg, registry)
    return plan.id_set if plan is not None else None
