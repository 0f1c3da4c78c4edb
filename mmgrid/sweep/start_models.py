"""The original base Theta(0) of a paradigm's checkpoints, in the paradigm's own tensor names.

MMGRid takes task vectors against the shared base LLM (Eq. 2). A paradigm wraps that LLM
(HLLM-style item + user LLMs, added semantic-ID rows), so its tensors are named
differently from the base checkpoint's. The paradigm's *start model* - ``build`` from the
base LLM with the same seed training used - holds exactly the base LLM's weights under
the paradigm's names, plus the freshly initialised parts; it is the Theta(0) of that
domain's task vectors. It is stored once as a ``base`` checkpoint (period ``start``)
whose lineage points at the base LLM, so the studies can name it by id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmgrid.config import GridConfig
from mmgrid.models.base import bundle_from_registry
from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.checkpoints import checkpoint_meta, lineage_root
from mmgrid.runtime.device import derive_seed, seed_everything
from mmgrid.sweep.evaluation import paradigm_params

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset


def start_model_id(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", paradigm: str, domain: str,
                   variant: str, trained_id: str) -> str:
    """Id of the paradigm's start model for ``domain`` (built and stored on first use).

    Falls back to the lineage root when the paradigm cannot build (e.g. a test double).
    """
    root = lineage_root(registry, trained_id)
    par = get_paradigm(paradigm)
    if not hasattr(par, "build"):
        return root
    seed = derive_seed(cfg.train.seed, paradigm, domain, "build")
    coords = {"paradigm": paradigm, "domain": domain, "period": "start", "variant": variant}
    params = {"built_from": root, "build_seed": seed, "role": "original_base"}
    parents = [(root, "init")]
    cid = registry.make_id(coords, "base", parents, params, None, cfg.train.seed)
    if registry.has(cid):
        return cid
    bundle = bundle_from_registry(registry, root)
    seed_everything(seed)
    model = par.build(bundle, prepared.domain(domain), paradigm_params(cfg, paradigm), seed)
    ck = par.save(model)
    state = {k: v.detach().cpu().contiguous() for k, v in ck.state.items()}
    return registry.put(state, coords, "base", parents=parents, params=params, files=ck.files,
                        meta=checkpoint_meta(ck, {}), seed=cfg.train.seed)
