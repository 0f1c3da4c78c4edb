"""The grid evaluation as executor jobs (:func:`mmgrid.eval.grid.evaluate_grid` with an executor).

A job (JSON in, JSON out, run by :mod:`mmgrid.exec` in a worker process or here):

* :func:`evaluate_cell_job`: one (paradigm, domain) cell - every seed's and variant's final
  checkpoint of the cell still to evaluate (retention on the first seed's replicate), then
  the cell's accuracy matrix when the cell is one of ``eval.matrix_paradigms``'s;
* :func:`popular_job`: the most-popular baseline of one domain.

The driver side (making the jobs, collecting their summaries) is :func:`mmgrid.eval.grid.run_eval_jobs`.

Each records into the registry exactly what the in-process loop records (same records, same
extra fields, same per-user files) and returns a JSON-able summary; the driver rebuilds the
:class:`~mmgrid.eval.grid.EvalSummary` from them, indexes the workers' records
(``registry.sync()``) and prints the per-model lines in a stable order (job order, then the
cell's own order). The base text loss (the retention baseline) is computed by the driver
before the jobs and passed to them. Results do not depend on the executor: every job
evaluates its models with the same seeded evaluators as the in-process loop.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from mmgrid.config import grid_from_dict
from mmgrid.eval.grid import CheckpointKey, accuracy_matrix, evaluate_final, evaluate_popular, heldout_texts
from mmgrid.eval.ranking import Evaluator
from mmgrid.registry import Registry
from mmgrid.runtime.context import open_prepared
from mmgrid.runtime.device import set_threads


def plain(value: Any) -> Any:
    """``value`` as JSON-able Python: dicts (string keys) and lists of str / int / float / bool / None,
    numpy scalars and arrays converted; NaN floats are kept (Python's json writes and reads them)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{type(value).__name__} {value!r} is not JSON-able (a job returns plain values)")


def _open(grid: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(cfg, worker-mode registry, prepared) of a job."""
    cfg = grid_from_dict(grid)
    set_threads(cfg.train.threads)
    return cfg, Registry.open(cfg.registry_root, index=False), open_prepared(cfg.prepared_dir)


def evaluate_cell_job(grid: dict[str, Any], paradigm: str, domain: str, models: list[list[Any]],
                      matrix_ids: dict[str, str] | None = None, base_text_loss: float | None = None) -> dict[str, Any]:
    """Executor entry point: evaluate one (paradigm, domain) cell.

    Args:
        grid: ``cfg.to_dict()``.
        paradigm, domain: the cell.
        models: ``[seed, variant, paradigm, domain, id]`` of each final checkpoint to evaluate, in order.
        matrix_ids: stage -> id of the default variant's first-seed checkpoints: also compute the
            cell's accuracy matrix (None: no matrix).
        base_text_loss: the base's held-out text loss (None: not measured).

    Returns:
        ``{"results": [[seed, variant, paradigm, domain, {group: {metric: value}}], ...],
        "retention": [[variant, paradigm, domain, {metric: value}], ...], "matrix": dict | None}``.
    """
    cfg, reg, prepared = _open(grid)
    texts = heldout_texts(prepared, cfg)
    base = float("nan") if base_text_loss is None else float(base_text_loss)
    evaluators: dict[tuple[str, str], Evaluator] = {}
    out: dict[str, Any] = {"results": [], "retention": [], "matrix": None}
    for seed, variant, par, dom, cid in models:
        res, ret = evaluate_final(cfg, reg, prepared, CheckpointKey(int(seed), variant, par, dom), cid, evaluators, texts, base)
        out["results"].append([int(seed), variant, par, dom, plain(dict(res))])
        if ret is not None:
            out["retention"].append([variant, par, dom, plain(ret)])
    if matrix_ids is not None:
        build = SimpleNamespace(ids={("default", paradigm, domain, stage): cid for stage, cid in matrix_ids.items()})
        out["matrix"] = plain(accuracy_matrix(cfg, reg, prepared, build, paradigm, domain))
    return out


def popular_job(grid: dict[str, Any], domain: str, redo: bool = False) -> dict[str, Any]:
    """Executor entry point: the most-popular baseline of one domain; returns ``{group: {metric: value}}``."""
    cfg, reg, prepared = _open(grid)
    return plain(dict(evaluate_popular(cfg, reg, prepared, domain, redo)))
