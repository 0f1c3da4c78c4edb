"""The cross-domain study as executor jobs (:func:`mmgrid.sweep.crossdomain.run_cross_domain` with an executor).

A job (JSON in, JSON out, run by :mod:`mmgrid.exec` in a worker process or here):

* :func:`baseline_job`: one (paradigm, domain) baseline - the domain's own t2 checkpoint;
* :func:`pair_job`: one (paradigm, pair) - every method x base x alpha of the pair (Eq. 7),
  each merged model evaluated on both domains.

The driver (:func:`mmgrid.sweep.crossdomain.run_cross_domain_jobs`) first makes every
(pair, base kind) base (:func:`~mmgrid.sweep.crossdomain.pair_bases`): the ``original``
start model of a domain and the ``neutral`` merged base of a pair (Eq. 8) are stored
checkpoints, so two jobs must never race to create the same one; a base that cannot be made
travels as its error message (:class:`~mmgrid.sweep.crossdomain.PairBases`) and the pair job skips the combinations that need it, as the
in-process loop does. Each job records exactly what the in-process loop records and returns
its rows (:data:`~mmgrid.sweep.crossdomain.COLUMNS` dicts); the driver concatenates them in
the in-process order (per paradigm: baselines, then pairs) and indexes the workers' records
(``registry.sync()``). Results do not depend on the executor.
"""

from __future__ import annotations

from typing import Any

from mmgrid.config import grid_from_dict
from mmgrid.eval.jobs import plain
from mmgrid.registry import Registry
from mmgrid.runtime.context import open_prepared
from mmgrid.runtime.device import set_threads
from mmgrid.sweep.crossdomain import CrossDomainRun, CrossPair, PairBases, baseline_rows, pair_rows
from mmgrid.sweep.evaluation import default_evaluator_factory
from mmgrid.sweep.merged_eval import MergedEvaluators

def _open(grid: dict[str, Any], redo: bool) -> CrossDomainRun:
    """The study's shared run of a job: cfg, a worker-mode registry, the evaluators."""
    cfg = grid_from_dict(grid)
    set_threads(cfg.train.threads)
    reg = Registry.open(cfg.registry_root, index=False)
    return CrossDomainRun(cfg, reg, MergedEvaluators(cfg, reg, open_prepared(cfg.prepared_dir), default_evaluator_factory,
                                                     redo))


def baseline_job(grid: dict[str, Any], paradigm: str, domain: str, p2: str, redo: bool = False) -> list[dict[str, Any]]:
    """Executor entry point: one domain's own t2 checkpoint (``method == "single"``); returns its rows."""
    return plain(baseline_rows(_open(grid, redo), paradigm, domain, p2))


def pair_job(grid: dict[str, Any], pair: dict[str, str], bases: dict[str, Any], redo: bool = False) -> list[dict[str, Any]]:
    """Executor entry point: every method x base x alpha of one pair; returns its rows.

    Args:
        grid: ``cfg.to_dict()``.
        pair: :meth:`CrossPair.to_dict` (paradigm, variant, both domains and their t1/t2 ids).
        bases: :meth:`PairBases.to_dict`: base kind -> id (None: no base), and the error message of
            each base the driver could not make (the combinations that need it are skipped with it).
        redo: merge and evaluate again even where the recipe is recorded.
    """
    run = _open(grid, redo)
    pb = PairBases(dict(bases["ids"]), dict(bases.get("errors") or {}))
    return plain(pair_rows(run, CrossPair(**pair), pb.id))
