"""How the studies load models and evaluate them in memory (adapters to mmgrid.eval).

Everything the sweeps need from the other concerns passes through here, so tests can
swap in a fake evaluator (see ``EvaluatorFactory``) and the sweeps never depend on how a
particular paradigm is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mmgrid.config import GridConfig
from mmgrid.eval.grid import grid_evaluator
from mmgrid.eval.ranking import EvalResults

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mmgrid.data.dataset import DomainData, PreparedDataset
    from mmgrid.paradigms.base import Paradigm

# model -> {group: {metric: value}}
EvalFn = Callable[["torch.nn.Module"], dict[str, dict[str, float]]]
# (cfg, paradigm name, paradigm, domain data, prepared) -> EvalFn, made once per domain
EvaluatorFactory = Callable[[GridConfig, str, "Paradigm", "DomainData", "PreparedDataset"], EvalFn]


def paradigm_params(cfg: GridConfig, name: str) -> dict[str, Any]:
    """The grid's ``paradigm_params.<name>`` mapping (empty when absent)."""
    return dict((cfg.paradigm_params or {}).get(name, {}) or {})


def default_evaluator_factory(cfg: GridConfig, name: str, paradigm: "Paradigm", domain: "DomainData",
                              prepared: "PreparedDataset") -> EvalFn:
    """An in-memory evaluator over the test split from :mod:`mmgrid.eval` (built once a domain).

    The evaluator caches the weight-independent work (test histories, targets, user
    groups, item popularity) so each sweep point only ranks.
    """
    ev = grid_evaluator(paradigm, domain, cfg)

    def evaluate(model: "torch.nn.Module") -> dict[str, dict[str, float]]:
        return _as_nested(ev.evaluate(model))

    return evaluate


def _as_nested(result: Any) -> EvalResults:
    """Normalise an evaluator's answer to {group: {metric: value}}, keeping its per-user values
    (``per_user``, see :class:`mmgrid.eval.ranking.EvalResults`) where it has them."""
    per = getattr(result, "per_user", None)
    if hasattr(result, "by_group"):
        result = result.by_group
    if hasattr(result, "to_dict") and not isinstance(result, dict):
        result = result.to_dict()
    return EvalResults({str(g): {str(k): float(v) for k, v in ms.items()} for g, ms in dict(result).items()}, per)


def eval_key(cfg: GridConfig) -> dict[str, Any]:
    """The evaluation settings a recorded number depends on (part of every study recipe, so a
    changed setting is a new recipe and not a cache hit)."""
    e = cfg.eval
    return {"split": e.split, "ks": list(e.ks), "groups": list(e.groups), "activity_phase": e.activity_phase,
            "max_users": e.max_users, "seed": cfg.train.seed}
