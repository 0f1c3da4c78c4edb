"""Evaluate a built grid: final checkpoints on the test window (all / active / non-active),
text retention against the base, the most-popular baseline, and the accuracy matrix R
for the paradigms in ``eval.matrix_paradigms``. Everything is recorded in the registry,
with the per-user values behind every number (``extra.per_user``) and their intervals.

Training seeds: the final checkpoint of every replicate (every seed of ``train.seeds``) is
evaluated on the same users (the sample is seeded with the first seed), so replicates pair
user by user. Most-popular is deterministic and evaluated once; text retention and the
accuracy matrix are measured on the first seed's replicate only.

:func:`evaluate_and_tabulate` is the one "evaluate the grid, then the baseline table"
that ``mmgrid build --eval``, ``mmgrid eval CONFIG`` and ``mmgrid demo`` call.

Execution: without an executor everything runs here, one model at a time. Given one
(:mod:`mmgrid.exec`), the work is split into independent jobs (:mod:`mmgrid.eval.jobs`):
one per (paradigm, domain) cell - every seed's and variant's final checkpoint of the cell,
then the cell's accuracy matrix - and one per domain for most-popular. The jobs record
exactly what the loop here records; the driver indexes their records (``registry.sync()``)
and rebuilds the :class:`EvalSummary`. Results do not depend on the executor."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mmgrid.eval.matrix import transfer_summary
from mmgrid.eval.popular import popular_ranking, put_popular
from mmgrid.eval.ranking import Evaluator, record_results
from mmgrid.eval.retention import retention_metrics, text_loss
from mmgrid.eval.table import baseline_table
from mmgrid.exec.base import Job
from mmgrid.models.base import bundle_from_registry, load_base
from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.checkpoints import load_checkpoint
from mmgrid.runtime.context import open_prepared, open_registry
from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
from mmgrid.runtime.plan import BuildResult, plan_grid
from mmgrid.runtime.gather import gather
from mmgrid.runtime.progress import progress as progress_bar

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry

RETENTION_SPLIT = "lm_heldout"
CELL_JOB = "mmgrid.eval.jobs:evaluate_cell_job"  # the jobs of an evaluation on an executor (mmgrid.eval.jobs)
POPULAR_JOB = "mmgrid.eval.jobs:popular_job"


class CheckpointKey(NamedTuple):
    """One final checkpoint of the grid, the one key of the evaluation's work list, its results and
    its retention (a tuple, so it travels through a job's JSON as ``[seed, variant, paradigm, domain]``)."""

    seed: int
    variant: str
    paradigm: str
    domain: str

    @property
    def cell(self) -> tuple[str, str]:
        """(paradigm, domain)."""
        return self.paradigm, self.domain


@dataclass
class EvalWork:
    """What one grid evaluation has to do.

    Attributes:
        todo: each final checkpoint to evaluate -> its id.
        cells: the (paradigm, domain) cells whose accuracy matrix is computed.
        domains: the domains (one most-popular baseline each).
        ids: the build's ids, (variant, paradigm, domain, stage) -> id.
    """

    todo: dict[CheckpointKey, str]
    cells: list[tuple[str, str]]
    domains: list[str]
    ids: dict[tuple[str, str, str, str], str]


@dataclass
class EvalSummary:
    """What :func:`evaluate_grid` measured.

    Attributes:
        results: checkpoint -> group -> metric -> value.
        popular: domain -> group -> metric -> value (most-popular).
        retention: checkpoint (the first seed's replicate) -> text-retention metrics.
        base_text_loss: the base's held-out text loss.
        matrices: (paradigm, domain) -> accuracy matrix and its summary.
        seconds: wall time.
    """

    results: dict[CheckpointKey, dict[str, dict[str, float]]] = field(default_factory=dict)
    popular: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    retention: dict[CheckpointKey, dict[str, float]] = field(default_factory=dict)
    base_text_loss: float = float("nan")
    matrices: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (paradigm, domain)
    seconds: float = 0.0


def grid_evaluator(par: Any, dom: Any, cfg: GridConfig, split: str | None = None, groups: Any = None) -> Evaluator:
    """The :class:`Evaluator` of the grid's ``eval:`` settings (split and groups overridable),
    seeded with the grid seed (the first training seed, so every replicate is evaluated on the
    same users): the one place that turns the settings into an evaluator."""
    e = cfg.eval
    return Evaluator(par, dom, split=split or e.split, ks=e.ks, groups=groups or e.groups,
                     activity_phase=e.activity_phase, max_users=e.max_users, seed=cfg.train.seed)


def _done(registry: Registry, cid: str, split: str) -> bool:
    res = registry.results(id=cid, split=split)
    return not res.empty


def evaluate_and_tabulate(cfg: GridConfig, plan: BuildResult | None = None, *, registry: Registry | None = None, prepared: PreparedDataset | None = None,
                          redo: bool = False, progress: bool = True, executor: Any = None) -> str:
    """Evaluate what is not evaluated yet (everything with ``redo``), then the Table-2-style
    Markdown baseline table.

    Rows: the grid's paradigms (SASRec included) and the most-popular baseline; columns:
    domain x {R@K, N@K} for ``eval.ks``, all users, the last stage, variant ``default``.

    Args:
        cfg: the GridConfig.
        plan: the grid's ids (a build's result; default: :func:`mmgrid.runtime.plan.plan_grid`).
        registry, prepared: already open handles (default: opened from ``cfg``).
        redo: evaluate again even where results are already recorded.
        progress: print one line per evaluated model.
        executor: run the evaluation as jobs on it (see :func:`evaluate_grid`); None runs here.
    """
    registry = registry if registry is not None else open_registry(cfg.registry_root)
    plan = plan if plan is not None else plan_grid(cfg, registry, prepared)
    evaluate_grid(cfg, plan, progress=progress, redo=redo, registry=registry, prepared=prepared, executor=executor)
    domains = list(dict.fromkeys(s.domain for s in plan.stages))
    return baseline_table(registry, cfg.paradigms, domains, ks=cfg.eval.ks, split=cfg.eval.split,
                          period=cfg.train.stages[-1], planned=plan.id_set)


def evaluate_grid(cfg: GridConfig, build: Any, progress: bool = True, redo: bool = False, registry: Registry | None = None,
                  prepared: PreparedDataset | None = None, executor: Any = None) -> EvalSummary:
    """Evaluate the grid built by ``build_grid`` (a ``BuildResult``) and record the results.

    Args:
        cfg: the GridConfig.
        build: the BuildResult (ids of every stage; :func:`mmgrid.runtime.plan.plan_grid` for a built grid).
        progress: print one line per evaluated model and show progress (rate, ETA).
        redo: evaluate again even where results are already recorded.
        registry, prepared: already open handles (default: opened from ``cfg``).
        executor: None evaluates here, one model at a time. Given an executor, one job per
            (paradigm, domain) cell and one per domain for most-popular
            (:func:`run_eval_jobs`, :mod:`mmgrid.eval.jobs`); the base text loss is computed here first.
            The results do not depend on the executor.
    """
    t0 = time.perf_counter()
    set_threads(cfg.train.threads)
    reg = registry if registry is not None else open_registry(cfg.registry_root)
    prepared = prepared if prepared is not None else open_prepared(cfg.prepared_dir)
    out = EvalSummary()
    texts = heldout_texts(prepared, cfg)
    if cfg.eval.retention and texts:
        base = bundle_from_registry(reg, build.base_id)
        out.base_text_loss = text_loss(base.model, base.tokenizer, texts, cfg.base.max_length)
        reg.record_eval(build.base_id, RETENTION_SPLIT, "all", {"text_loss": out.base_text_loss})
    domains = list(dict.fromkeys(s.domain for s in build.stages))
    ids = build.ids
    todo = {key: cid for key, cid in _finals(build).items() if redo or not _done(reg, cid, cfg.eval.split)}
    cells = [(paradigm, domain) for paradigm in cfg.eval.matrix_paradigms if paradigm in cfg.paradigms
             for domain in domains if all(("default", paradigm, domain, s) in ids for s in cfg.train.stages)]
    if executor is not None:
        run_eval_jobs(cfg, reg, executor, EvalWork(todo, cells, domains, build.ids), out, progress=progress, redo=redo)
        out.seconds = time.perf_counter() - t0
        return out
    bar = progress_bar(total=len(todo) + len(domains) + len(cells), desc="evaluate", unit="eval",
                       enabled=progress, leave=True, min_interval=0.0)
    evaluators: dict[tuple[str, str], Evaluator] = {}  # one per cell: every variant and seed reuses its examples
    for key, cid in todo.items():
        bar.set_postfix(model=f"{key.variant}/{key.paradigm}/{key.domain}")
        res, ret = evaluate_final(cfg, reg, prepared, key, cid, evaluators, texts, out.base_text_loss)
        out.results[key] = res
        if ret is not None:
            out.retention[key] = ret
        if progress:
            print(eval_line(cfg, key, res), flush=True)
        bar.update(1)
    for domain in domains:
        bar.set_postfix(model=f"popular/{domain}")
        out.popular[domain] = evaluate_popular(cfg, reg, prepared, domain, redo)
        bar.update(1)
    for paradigm, domain in cells:  # rows fully built in the default variant
        bar.set_postfix(model=f"matrix {paradigm}/{domain}")
        out.matrices[(paradigm, domain)] = accuracy_matrix(cfg, reg, prepared, build, paradigm, domain)
        bar.update(1)
    bar.close()
    out.seconds = time.perf_counter() - t0
    return out


def evaluate_final(cfg: GridConfig, reg: Registry, prepared: PreparedDataset, key: CheckpointKey, cid: str,
                   evaluators: dict[tuple[str, str], Evaluator], texts: list[str],
                   base_text_loss: float) -> tuple[Any, dict[str, float] | None]:
    """Evaluate and record one final checkpoint ``cid`` (``key``: a :class:`CheckpointKey` or the
    same four values as a tuple): its ranking results, and its text retention when it is the first
    seed's replicate.

    ``evaluators`` caches one :class:`Evaluator` per (paradigm, domain) (filled here).

    Returns:
        (ranking results, retention metrics or None when retention is not measured).
    """
    seed, variant, paradigm, domain = CheckpointKey(*key)
    par, dom = get_paradigm(paradigm), prepared.domain(domain)
    params = dict(cfg.paradigm_params.get(paradigm, {}))
    model = par.load(load_checkpoint(reg, cid), dom, params)
    if (paradigm, domain) not in evaluators:
        evaluators[(paradigm, domain)] = grid_evaluator(par, dom, cfg)
    res = evaluators[(paradigm, domain)].evaluate(model)
    record_results(reg, cid, cfg.eval.split, res, domain)
    if not (cfg.eval.retention and texts and seed == cfg.train.seed):
        return res, None
    ret = retention_metrics(par, model, texts, base_text_loss, cfg.base.max_length)
    clean = {k: v for k, v in ret.items() if v == v}
    if clean:
        reg.record_eval(cid, RETENTION_SPLIT, "all", clean, extra={"eval_domain": domain})
    return res, ret


def eval_line(cfg: GridConfig, key: CheckpointKey, res: Any) -> str:
    """The progress line of one evaluated model: ``eval VARIANT/PARADIGM/DOMAIN[ seed=S]: R@10=...``."""
    seed, variant, paradigm, domain = key
    tag = "" if len(cfg.train.seed_list) == 1 else f" seed={seed}"
    return f"eval {variant}/{paradigm}/{domain}{tag}: R@10={res['all'].get('recall@10', float('nan')):.4f}"


def eval_jobs(cfg: GridConfig, work: EvalWork, base_text_loss: float, redo: bool = False) -> list[Job]:
    """The jobs of one grid evaluation: a cell job for every cell with a model to evaluate or a
    matrix to compute (in the order of ``work.todo``, then ``work.cells``), then a popular job per domain."""
    todo, cells, domains, ids = work.todo, work.cells, work.domains, work.ids
    grid = cfg.to_dict()
    models: dict[tuple[str, str], list[list[Any]]] = {}
    for key, cid in todo.items():
        models.setdefault(CheckpointKey(*key).cell, []).append([*key, cid])
    loss = None if math.isnan(base_text_loss) else float(base_text_loss)
    jobs = []
    for paradigm, domain in dict.fromkeys([*models, *cells]):
        matrix = ({s: ids[("default", paradigm, domain, s)] for s in cfg.train.stages}
                  if (paradigm, domain) in cells else None)
        kwargs = {"grid": grid, "paradigm": paradigm, "domain": domain, "models": models.get((paradigm, domain), []),
                  "matrix_ids": matrix, "base_text_loss": loss}
        jobs.append(Job(CELL_JOB, kwargs, name=f"eval:{paradigm}:{domain}"))
    jobs += [Job(POPULAR_JOB, {"grid": grid, "domain": d, "redo": redo}, name=f"eval:popular:{d}") for d in domains]
    return jobs


def run_eval_jobs(cfg: GridConfig, reg: Registry, executor: Any, work: EvalWork, out: EvalSummary, progress: bool = True,
                  redo: bool = False) -> None:
    """Submit :func:`eval_jobs`, wait for them (a progress bar over jobs), print each evaluated
    model's line, index the jobs' records and fill ``out`` in the in-process loop's key order."""
    jobs = eval_jobs(cfg, work, out.base_text_loss, redo)
    futures = [executor.submit(job) for job in jobs]
    results: dict[CheckpointKey, Any] = {}
    retention: dict[CheckpointKey, Any] = {}
    gather(futures, reg, "evaluate", enabled=progress,
           on_result=lambda i, got: _collect(cfg, jobs[i], got, out, results, retention, progress))
    for key in work.todo:  # the in-process loop's order
        out.results[key] = results[key]
        if key in retention:
            out.retention[key] = retention.pop(key)
    out.popular = {d: out.popular[d] for d in work.domains}
    out.matrices = {c: out.matrices[c] for c in work.cells}


def _collect(cfg: GridConfig, job: Job, got: Any, out: EvalSummary, results: dict, retention: dict, progress: bool) -> None:
    """Take one job's answer into ``out`` (popular, matrices) and ``results`` / ``retention``
    (ordered later); print its models' lines."""
    if job.fn == POPULAR_JOB:
        out.popular[job.kwargs["domain"]] = got
        return
    for seed, variant, paradigm, domain, res in got["results"]:
        key = CheckpointKey(int(seed), variant, paradigm, domain)
        results[key] = res
        if progress:
            print(eval_line(cfg, key, res), flush=True)
    # retention is measured on the first seed's replicate only
    retention.update({CheckpointKey(cfg.train.seed, v, p, d): ret for v, p, d, ret in got["retention"]})
    if got["matrix"] is not None:
        out.matrices[(job.kwargs["paradigm"], job.kwargs["domain"])] = got["matrix"]


def _finals(build: Any) -> dict[CheckpointKey, str]:
    """Each final checkpoint's key -> id of the last stage built."""
    last: dict[CheckpointKey, str] = {}
    for s in build.stages:
        last[CheckpointKey(getattr(s, "seed", 0), s.variant, s.paradigm, s.domain)] = s.id
    return last


def heldout_texts(prepared: PreparedDataset, cfg: GridConfig) -> list[str]:
    """The held-out base texts of the retention measure (the first ``eval.retention_docs``)."""
    texts = list(prepared.lm_text("heldout"))
    n = cfg.eval.retention_docs
    return texts[:n] if n is not None else texts


def evaluate_popular(cfg: GridConfig, reg: Registry, prepared: PreparedDataset, domain: str,
                     redo: bool = False) -> dict[str, dict[str, float]]:
    """Most-popular baseline of ``domain`` over the training phases, recorded in the registry."""
    dom = prepared.domain(domain)
    phases = list(cfg.eval.popular_phases or cfg.train.stages)
    exclude = bool(cfg.eval.popular_exclude_history)
    cid = put_popular(reg, dom, phases, prepared.fingerprint, cfg.train.seed, exclude_history=exclude)
    ev = grid_evaluator(None, dom, cfg)
    res = ev.evaluate_ranked(popular_ranking(dom.popularity(phases), max(cfg.eval.ks),
                                             ev.histories if exclude else None))
    if redo or not _done(reg, cid, cfg.eval.split):
        record_results(reg, cid, cfg.eval.split, res, domain)
    return res


def accuracy_matrix(cfg: GridConfig, reg: Registry, prepared: PreparedDataset, build: Any, paradigm: str, domain: str,
                    metric: str = "recall@10", variant: str = "default") -> dict[str, Any]:
    """R[model trained through period i, evaluated on period j] over the training stages (+ the
    start row b), with BWT / FWT / forgetting; every entry is recorded (split = period j)."""
    par, dom = get_paradigm(paradigm), prepared.domain(domain)
    params = dict(cfg.paradigm_params.get(paradigm, {}))
    stages = list(cfg.train.stages)
    ids = build.ids
    evs = {p: grid_evaluator(par, dom, cfg, split=p, groups=["all"]) for p in stages}
    base, _ = load_base(cfg.base, prepared, reg, seed=cfg.train.seed)
    seed = derive_seed(cfg.train.seed, paradigm, domain, "build")
    seed_everything(seed)
    start = par.build(base, dom, params, seed)
    b = np.array([evs[p].evaluate(start)["all"][metric] for p in stages])
    R = np.zeros((len(stages), len(stages)))
    for i, si in enumerate(stages):
        cid = ids[(variant, paradigm, domain, si)]
        model = par.load(load_checkpoint(reg, cid), dom, params)
        for j, sj in enumerate(stages):
            res = evs[sj].evaluate(model)
            record_results(reg, cid, sj, res, domain, extra={"matrix": True})
            R[i, j] = res["all"][metric]
    summary = transfer_summary(R, b)
    last = ids[(variant, paradigm, domain, stages[-1])]
    clean = {k: v for k, v in summary.items() if v == v}
    if clean:
        reg.record_eval(last, "matrix", "all", clean, extra={"eval_domain": domain, "metric": metric})
    return {"periods": stages, "R": R.tolist(), "b": b.tolist(), "metric": metric, **summary}
