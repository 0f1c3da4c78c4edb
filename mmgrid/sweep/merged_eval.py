"""In-memory evaluation of merged states for the cross-domain study (:mod:`mmgrid.sweep.crossdomain`):
one evaluator and one loaded t2 model per (paradigm, domain), reused across merges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from mmgrid.config import GridConfig
from mmgrid.merge.inplace import apply_if_fits
from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.checkpoints import load_checkpoint
from mmgrid.sweep.evaluation import EvalFn, EvaluatorFactory, paradigm_params

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset


class MergedEvaluators:
    """One evaluator and one loaded t2 model per (paradigm, domain), built on first use."""

    def __init__(self, cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", factory: EvaluatorFactory,
                 redo: bool = False) -> None:
        self.cfg, self.registry, self.prepared, self.factory, self.redo = cfg, registry, prepared, factory, redo
        self._cache: dict[tuple[str, str], tuple[Any, EvalFn]] = {}
        self._models: dict[tuple[str, str], Any] = {}

    def get(self, paradigm: str, domain: str) -> tuple[Any, EvalFn]:
        key = (paradigm, domain)
        if key not in self._cache:
            par = get_paradigm(paradigm)
            data = self.prepared.domain(domain)
            self._cache[key] = (par, self.factory(self.cfg, paradigm, par, data, self.prepared))
        return self._cache[key]

    def evaluate_state(self, paradigm: str, domain: str, p2_id: str, state: dict,
                       meta: dict) -> dict[str, dict[str, float]]:
        """Evaluate ``state`` as a model of ``domain`` (files and meta of its t2 checkpoint).

        The domain's model is built once; a merged state with the same tensor shapes is
        copied into it in place, one with other shapes (added token rows of the other
        domain) is loaded afresh by the paradigm.
        """
        par, evaluate = self.get(paradigm, domain)
        key = (paradigm, domain)
        model = self._models.get(key)
        if model is None or meta.get("added_rows") or not apply_if_fits(model, state):
            ck = load_checkpoint(self.registry, p2_id, state=state)
            if meta.get("added_rows"):
                ck.meta = {**ck.meta, "added_rows": meta["added_rows"]}
                ck.added_rows = {k: (int(v[0]), list(v[1])) for k, v in meta["added_rows"].items()}
            model = par.load(ck, self.prepared.domain(domain), paradigm_params(self.cfg, paradigm))
            if not meta.get("added_rows"):
                self._models[key] = model
        model.eval()
        with torch.no_grad():
            return evaluate(model)
