"""The cross-domain study (``mmgrid sweep cross-domain``): pairs x methods x bases x alpha.

MMGRid section 4. Two domains' t2 checkpoints are merged (Eq. 7:
theta* = base + alpha TRIM(tau_i) + (1 - alpha) TRIM(tau_j)) with task vectors taken
against one of three bases (section 4.3):

* ``original``: the paradigm's start model built from the shared base LLM for the pair's
  first domain (:mod:`mmgrid.sweep.start_models`);
* ``historical``: the t1 checkpoint of the pair's first domain;
* ``neutral``: AVERAGE(theta_i^t1, theta_j^t1) (Eq. 8), stored once as a merged checkpoint.

Each merged model is evaluated in memory on both source domains; the relative change
against each domain's own t2 checkpoint (evaluated by the same evaluator) gives the
paper's Figures 3 and 4. Semantic-ID merges keep both domains' token rows (the merge
engine appends each input's added rows). Methods whose result does not depend on the
base (weight averaging) run once, with base ``none``.

Seeds: the study runs on the first training seed's replicate only (``train.seed``, the
first of ``train.seeds``), to keep the demo's budget; every record says so in
``extra.seed`` (the report states it). Each evaluation keeps its per-user values.

Execution: without an executor everything runs here, in order. Given one (:mod:`mmgrid.exec`),
each (paradigm, domain) baseline and each (paradigm, pair) - every method x base x alpha of
the pair, evaluated on both domains - is one job (:mod:`mmgrid.sweep.crossdomain_jobs`); the
stored bases (start models, neutral bases) are made here first, so no two jobs ever create
the same checkpoint. Rows come back in the in-process order; results do not depend on the
executor.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

import pandas as pd
import torch
from mmgrid.runtime.gather import gather
from mmgrid.runtime.plan import BuildResult, planned_ids
from mmgrid.runtime.progress import progress as progress_bar

from mmgrid.config import CrossDomainSweepConfig, GridConfig
from mmgrid.errors import ConfigError, MergeError
from mmgrid.merge import merge_with_info
from mmgrid.merge.api import NEUTRAL_BASE_METHOD
from mmgrid.merge.methods import eq7, get_method, identity, weighs
from mmgrid.exec.base import Job
from mmgrid.registry.names import hash_json
from mmgrid.eval.ranking import record_evaluation
from mmgrid.sweep.evaluation import EvaluatorFactory, default_evaluator_factory, eval_key
from mmgrid.sweep.merged_eval import MergedEvaluators
from mmgrid.sweep.results import recorded, study_frame
from mmgrid.sweep.start_models import start_model_id
from mmgrid.sweep.temporal import periods, seeded_id

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.exec.base import Executor

STUDY = "cross_domain"
BASELINE_JOB = "mmgrid.sweep.crossdomain_jobs:baseline_job"  # the jobs of a run on an executor
PAIR_JOB = "mmgrid.sweep.crossdomain_jobs:pair_job"
BASE_KINDS = ("original", "historical", "neutral")
PAIR_SEP = "+"  # a pair's domain coordinate is "di+dj" (CrossPair.name)
COLUMNS = ["study", "paradigm", "variant", "pair", "domain_i", "domain_j", "method", "base_kind", "base_id", "alpha",
           "eval_domain", "group", "metric", "value", "recipe_hash"]
# merge(method, [id_i, id_j], base=id|None, registry=..., **params) -> (state, meta)
MergeFn = Callable[..., "tuple[dict[str, torch.Tensor], dict[str, Any]]"]
# base kind -> id of the base (None: no base); raises MergeError where it cannot be made
BaseOf = Callable[[str], Optional[str]]


def domain_pairs(domains: list[str], pairs: list[list[str]] | None) -> list[tuple[str, str]]:
    """The configured pairs (checked) or every unordered pair of ``domains`` in order."""
    if pairs is None:
        return list(itertools.combinations(domains, 2))
    out = []
    for k, p in enumerate(pairs):
        if len(p) != 2 or p[0] == p[1] or any(d not in domains for d in p):
            raise ConfigError(f"sweeps.cross_domain.pairs[{k}]: {p} must be two different domains of {domains}.")
        out.append((p[0], p[1]))
    return out


def method_params(method: str, params: dict[str, Any], alpha: float) -> tuple[dict[str, Any], bool]:
    """``params`` with the Eq. 7 weights (alpha, 1 - alpha), as the method's shared weight
    parameters take them (:func:`mmgrid.merge.methods.eq7`).

    Returns:
        (params, supports_alpha); a method that does not weigh its inputs ignores alpha.
    """
    if not weighs(get_method(method).Params):
        return dict(params), False
    return {**params, **eq7(alpha)}, True


def needs_base(method: str) -> bool:
    return bool(get_method(method).needs_base)


def store_neutral_base(registry: Registry, p1_i: str, p1_j: str, coords: dict[str, Any], merge_fn: MergeFn) -> str:
    """The neutral base of MMGRid Eq. 8 (defined once: :func:`mmgrid.merge.api.neutral_base`), stored
    once as a merged checkpoint made by its method (:data:`~mmgrid.merge.api.NEUTRAL_BASE_METHOD`)."""
    params = {"method": NEUTRAL_BASE_METHOD, "equation": "MMGRid Eq. 8", "role": "neutral_base"}
    parents = [(p1_i, "merge_input"), (p1_j, "merge_input")]
    cid = registry.make_id(coords, "merged", parents, params, None, None)
    if registry.has(cid):
        return cid
    state, meta = merge_fn(NEUTRAL_BASE_METHOD, [p1_i, p1_j], base=None, registry=registry)
    return registry.put(state, coords, "merged", parents=parents, params=params, meta=meta)


def default_merge_fn(method: str, models: list[Any], base: Any = None, registry: Registry | None = None,
                     **params: Any) -> "tuple[dict[str, torch.Tensor], dict[str, Any]]":
    """Run :func:`mmgrid.merge.merge_with_info`; return the state and the meta a paradigm needs to load it
    (``added_rows``: both inputs' added token rows, kept side by side)."""
    state, info = merge_with_info(method, models, base=base, registry=registry, **params)
    meta: dict[str, Any] = {"merge": {"method": info.method, "params": info.params}}
    if info.added_rows:
        meta["added_rows"] = info.added_rows
    return state, meta


@dataclass(frozen=True)
class CrossPair:
    """One (paradigm, pair of domains) of the study with the checkpoints it merges (the first training
    seed's t1 and t2 of each domain). In the registry a pair is the domain coordinate ``"di+dj"``
    (:attr:`name`; :meth:`split` reads it back): the one spelling of that coordinate."""

    paradigm: str
    variant: str
    domain_i: str
    domain_j: str
    t1_i: str
    t2_i: str
    t1_j: str
    t2_j: str

    @property
    def name(self) -> str:
        return f"{self.domain_i}{PAIR_SEP}{self.domain_j}"

    @staticmethod
    def split(name: str) -> tuple[str, str]:
        """``"di+dj"`` -> ``(di, dj)``."""
        di, _, dj = str(name).partition(PAIR_SEP)
        return di, dj or di

    @classmethod
    def of(cls, cfg: GridConfig, paradigm: str, pair: tuple[str, str], ids: dict[str, tuple[str, str]]) -> "CrossPair":
        """The pair ``(di, dj)`` with ``ids`` (domain -> (t1 id, t2 id), :func:`pair_ids`)."""
        (di, dj), v = pair, cfg.sweeps.cross_domain.variant
        return cls(paradigm, v, di, dj, ids[di][0], ids[di][1], ids[dj][0], ids[dj][1])

    def to_dict(self) -> dict[str, str]:
        """JSON-able (a job's argument)."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class PairBases:
    """The base of each base kind a pair's methods use (MMGRid 4.3): kind -> id (None: no base),
    and for a kind the merge engine could not make, its error message instead of an id."""

    ids: dict[str, str | None]
    errors: dict[str, str] = field(default_factory=dict)

    def id(self, kind: str) -> str | None:
        """The id of ``kind``'s base.

        Raises:
            MergeError: the base could not be made (the combinations that need it are skipped).
        """
        if kind in self.errors:
            raise MergeError(self.errors[kind])
        return self.ids[kind]

    def to_dict(self) -> dict[str, Any]:
        return {"ids": dict(self.ids), "errors": dict(self.errors)}


@dataclass
class CrossDomainRun:
    """What every merge and evaluation of one run of the study shares."""

    cfg: GridConfig
    registry: Registry
    evals: MergedEvaluators
    merge_fn: MergeFn = default_merge_fn

    @property
    def study(self) -> CrossDomainSweepConfig:
        return self.cfg.sweeps.cross_domain


@dataclass(frozen=True)
class RowKey:
    """The columns of :data:`COLUMNS` one evaluation's rows share besides its record."""

    pair: str
    domain_i: str
    domain_j: str
    base_id: str | None = None
    alpha: float | None = None


def _t2_ids(registry: Registry, paradigm: str, variant: str, domain: str, cfg: GridConfig,
            plan: BuildResult | None = None) -> tuple[str, str]:
    """Ids of the t1 and t2 checkpoints of the first training seed's replicate (the planned ids of ``plan``)."""
    t1, t2 = periods(cfg)
    c = {"paradigm": paradigm, "domain": domain, "variant": variant, "kind": "trained"}
    return (seeded_id(registry, {**c, "period": t1}, cfg.train.seed, plan),
            seeded_id(registry, {**c, "period": t2}, cfg.train.seed, plan))


def run_cross_domain(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset",
                     evaluator_factory: EvaluatorFactory | None = None, merge_fn: MergeFn | None = None,
                     redo: bool = False, executor: "Executor | None" = None) -> pd.DataFrame:
    """Run the configured pairs x methods x bases x alphas; record and return every evaluation.

    Args:
        cfg: the grid (``sweeps.cross_domain``).
        registry: an open registry with the t1/t2 checkpoints of each paradigm and domain.
        prepared: the prepared dataset.
        evaluator_factory: override the evaluator (tests).
        merge_fn: override the merge call (tests).
        redo: merge and evaluate again even where the registry holds the recipe's results
            (by default a recorded recipe is a cache hit: nothing is merged or loaded).
        executor: None runs here, in order. Given an executor, one job per (paradigm, domain)
            baseline and per (paradigm, pair), after the bases are stored here
            (:func:`run_cross_domain_jobs`, :mod:`mmgrid.sweep.crossdomain_jobs`); ignored when
            ``evaluator_factory`` or ``merge_fn`` is given (they only work here). The
            results do not depend on the executor.

    Returns:
        Long results, columns :data:`COLUMNS`; ``method == "single"`` rows are each domain's
        own t2 checkpoint (the baseline of the relative change).
    """
    cd = cfg.sweeps.cross_domain
    bad = [b for b in cd.bases if b not in BASE_KINDS]
    if bad:
        raise ConfigError(f"sweeps.cross_domain.bases: {bad} unknown; use {list(BASE_KINDS)}.")
    pairs = domain_pairs(list(prepared.domains), cd.pairs)
    if executor is not None and evaluator_factory is None and merge_fn is None:
        return pd.DataFrame(run_cross_domain_jobs(cfg, registry, prepared, pairs, executor, redo), columns=COLUMNS)
    run = CrossDomainRun(cfg, registry, MergedEvaluators(cfg, registry, prepared,
                                                         evaluator_factory or default_evaluator_factory, redo),
                         merge_fn or default_merge_fn)
    rows: list[dict[str, Any]] = []
    for paradigm in cd.paradigms:
        ids = pair_ids(cfg, registry, paradigm, pairs)
        for d, (_, p2) in ids.items():
            rows += baseline_rows(run, paradigm, d, p2)
        for pair in _progress(pairs, f"cross-domain {paradigm}"):
            cp = CrossPair.of(cfg, paradigm, pair, ids)
            rows += pair_rows(run, cp, _base_cache(run, prepared, cp))
    return pd.DataFrame(rows, columns=COLUMNS)


def pair_ids(cfg: GridConfig, registry: Registry, paradigm: str, pairs: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """domain -> (t1 id, t2 id) of every domain of ``pairs`` (sorted by name; first training seed)."""
    cd = cfg.sweeps.cross_domain
    plan = planned_ids(cfg, registry)  # the grid's ids: equal coords (an older identity) never make it ambiguous
    return {d: _t2_ids(registry, paradigm, cd.variant, d, cfg, plan) for d in sorted({d for p in pairs for d in p})}


def _base_cache(run: CrossDomainRun, prepared: PreparedDataset, pair: CrossPair) -> BaseOf:
    """:func:`base_id` of one pair, made on first use and remembered (a failure is tried again)."""
    cache: dict[str, str | None] = {}

    def base_of(kind: str) -> str | None:
        if kind not in cache:
            cache[kind] = base_id(run.cfg, run.registry, prepared, pair, kind, run.merge_fn)
        return cache[kind]

    return base_of


def pair_base_kinds(cfg: GridConfig) -> list[str]:
    """The base kinds the configured methods use, in first-use order (``none`` for base-free methods)."""
    cd = cfg.sweeps.cross_domain
    return list(dict.fromkeys(k for m in cd.methods for k in (list(cd.bases) if needs_base(m) else ["none"])))


def pair_bases(cfg: GridConfig, registry: Registry, prepared: PreparedDataset, pair: CrossPair) -> PairBases:
    """Make (or find) every base of one pair that the configured methods use. A base the merge
    engine cannot make is kept as its error message (:attr:`PairBases.errors`); a ConfigError, the
    user's to fix, is raised."""
    ids: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    for kind in pair_base_kinds(cfg):
        try:
            ids[kind] = base_id(cfg, registry, prepared, pair, kind, default_merge_fn)
        except MergeError as exc:
            if isinstance(exc, ConfigError):
                raise
            errors[kind] = str(exc)
    return PairBases(ids, errors)


def run_cross_domain_jobs(cfg: GridConfig, registry: Registry, prepared: PreparedDataset, pairs: list[tuple[str, str]], executor: Any,
                          redo: bool = False) -> list[dict[str, Any]]:
    """Submit the study's jobs (per paradigm: a baseline job per domain, then a pair job per pair,
    each after its bases are made here), wait for them in order (a progress bar over jobs),
    index the jobs' records; returns the rows in the in-process order."""
    cd = cfg.sweeps.cross_domain
    grid = cfg.to_dict()
    futures = []
    for paradigm in cd.paradigms:
        ids = pair_ids(cfg, registry, paradigm, pairs)
        for d, (_, p2) in ids.items():
            job = Job(BASELINE_JOB, {"grid": grid, "paradigm": paradigm, "domain": d, "p2": p2, "redo": redo},
                      name=f"cross-domain:{paradigm}:{d}")
            futures.append(executor.submit(job))
        for pair in pairs:
            cp = CrossPair.of(cfg, paradigm, pair, ids)
            kwargs = {"grid": grid, "pair": cp.to_dict(), "bases": pair_bases(cfg, registry, prepared, cp).to_dict(),
                      "redo": redo}
            futures.append(executor.submit(Job(PAIR_JOB, kwargs, name=f"cross-domain:{paradigm}:{cp.name}")))
    return [row for got in gather(futures, registry, "cross-domain") for row in got]


def baseline_rows(run: CrossDomainRun, paradigm: str, domain: str, p2: str) -> list[dict]:
    """One domain's own t2 checkpoint (``method == "single"``), the baseline of the relative change."""
    rec = {"method": "single", "inputs": [p2], "eval": eval_key(run.cfg)}
    if not run.evals.redo and recorded(run.registry, [hash_json(rec)], STUDY):
        return _frame_rows(study_frame(run.registry, STUDY, recipe_hash=hash_json(rec)))
    state = run.registry.load(p2)
    res = run.evals.evaluate_state(paradigm, domain, p2, state, {})
    extra = {"study": STUDY, "paradigm": paradigm, "variant": run.study.variant, "domain": domain,
             "eval_domain": domain, "method": "single", "base_kind": "none", "seed": run.cfg.train.seed}
    # recorded as a recipe, not against p2's id, so the checkpoint's own evaluations stay untouched
    return _record(run, rec, extra, res, RowKey(domain, domain, domain))


def pair_rows(run: CrossDomainRun, pair: CrossPair, base_of: BaseOf) -> list[dict]:
    """Every method x base x alpha of one pair; a combination the engine cannot merge is skipped with a message."""
    cd = run.study
    rows: list[dict] = []
    for method, mparams in cd.methods.items():
        for kind in (list(cd.bases) if needs_base(method) else ["none"]):
            try:
                rows += _alphas(run, pair, method, dict(mparams or {}), (kind, base_of(kind)))
            except MergeError as exc:  # e.g. SASRec's per-domain item tables are not mergeable: say so, go on
                if isinstance(exc, ConfigError):  # a bad parameter is the user's to fix
                    raise
                print(f"cross-domain: skipped {pair.paradigm} {pair.name} {method} base={kind}: {exc}",
                      file=sys.stderr)
    return rows


def _alphas(run: CrossDomainRun, pair: CrossPair, method: str, mparams: dict[str, Any],
            base: tuple[str, str | None]) -> list[dict]:
    """Merge one pair with one method and ``base`` ((kind, id)) over the alpha grid (Eq. 7: the
    method's weights from :func:`mmgrid.merge.methods.eq7`); evaluate on both domains."""
    cd = run.study
    kind, bid = base
    rows: list[dict] = []
    for alpha in cd.alphas:
        params, uses_alpha = method_params(method, mparams, float(alpha))
        if not uses_alpha and alpha != cd.alphas[0]:
            continue
        a = float(alpha) if uses_alpha else None
        rec = {**identity(method), "params": params, "inputs": [pair.t2_i, pair.t2_j], "base": bid,
               "base_kind": kind, "alpha": a, "equation": "MMGRid Eq. 7", "eval": eval_key(run.cfg)}
        if not run.evals.redo and recorded(run.registry, [hash_json(rec)], STUDY):
            rows += _frame_rows(study_frame(run.registry, STUDY, recipe_hash=hash_json(rec)))
            continue
        state, meta = run.merge_fn(method, [pair.t2_i, pair.t2_j], base=bid, registry=run.registry, **params)
        extra = {"study": STUDY, "paradigm": pair.paradigm, "variant": pair.variant, "domain": pair.name,
                 "method": method, "base_kind": kind, "alpha": a, "seed": run.cfg.train.seed}
        key = RowKey(pair.name, pair.domain_i, pair.domain_j, bid, a)
        for ed, p2 in ((pair.domain_i, pair.t2_i), (pair.domain_j, pair.t2_j)):
            res = run.evals.evaluate_state(pair.paradigm, ed, p2, state, meta)
            rows += _record(run, rec, {**extra, "eval_domain": ed}, res, key)
    return rows


def base_id(cfg: GridConfig, registry: Registry, prepared: PreparedDataset, pair: CrossPair, kind: str, merge_fn: MergeFn) -> str | None:
    """Id of the base of one (pair, base kind) (MMGRid section 4.3); None for ``none``."""
    if kind == "none":
        return None
    if kind == "original":
        return start_model_id(cfg, registry, prepared, pair.paradigm, pair.domain_i, pair.variant, pair.t2_i)
    if kind == "historical":
        return pair.t1_i
    coords = {"paradigm": pair.paradigm, "domain": pair.name, "period": "neutral_base", "variant": pair.variant}
    return store_neutral_base(registry, pair.t1_i, pair.t1_j, coords, merge_fn)


def _record(run: CrossDomainRun, rec: dict, extra: dict, res: dict[str, dict[str, float]], key: RowKey) -> list[dict]:
    rows = []
    rhash = hash_json(rec)
    for group, metrics in record_evaluation(run.registry, None, run.cfg.eval.split, res, recipe=rec,
                                            extra=extra).items():
        for metric, value in metrics.items():
            rows.append({"study": STUDY, "paradigm": extra["paradigm"], "variant": extra["variant"], "pair": key.pair,
                         "domain_i": key.domain_i, "domain_j": key.domain_j, "method": extra["method"],
                         "base_kind": extra["base_kind"], "base_id": key.base_id, "alpha": key.alpha,
                         "eval_domain": extra["eval_domain"], "group": group, "metric": metric, "value": float(value),
                         "recipe_hash": rhash})
    return rows


def _progress(items: list, desc: str) -> Any:
    return progress_bar(items, desc=desc, unit="pair", leave=True)


def relative_change(df: pd.DataFrame, metric: str = "ndcg@10", group: str = "all") -> pd.DataFrame:
    """Merged rows with ``baseline`` (the eval domain's own t2 value) and ``rel_change`` = merged / baseline - 1.

    Where the baseline is 0 the relative change is undefined: it is NaN, and the summaries
    (which skip NaN) leave that domain out instead of averaging an infinity.

    Args:
        df: the study's long results (:data:`COLUMNS`).
        metric: the metric compared.
        group: the user group compared.
    """
    sub = df[(df["metric"] == metric) & (df["group"] == group)]
    base = sub[sub["method"] == "single"].groupby(["paradigm", "eval_domain"])["value"].last()
    merged = sub[sub["method"] != "single"].copy()
    key = list(zip(merged["paradigm"], merged["eval_domain"]))
    merged["baseline"] = [base.get(k, float("nan")) for k in key]
    ok = merged["baseline"] > 0
    merged["rel_change"] = (merged["value"] / merged["baseline"].where(ok)) - 1.0
    return merged.reset_index(drop=True)


def cross_domain_results(registry: Registry, paradigm: str | None = None) -> pd.DataFrame:
    """The study's evaluations as stored in the registry, in :data:`COLUMNS` (newest wins)."""
    return _to_columns(study_frame(registry, STUDY, paradigm=paradigm))


def _frame_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return _to_columns(df).to_dict("records")


def _to_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Registry result rows of this study -> :data:`COLUMNS`."""
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    recs = df["recipe"].map(lambda r: json.loads(r) if isinstance(r, str) else {})
    df["pair"] = df["domain"]
    df["base_id"] = recs.map(lambda r: r.get("base"))
    single = df["method"] == "single"
    split = [(d, d) if s else CrossPair.split(p) for d, s, p in zip(df["domain"], single, df["pair"])]
    df["domain_i"] = [i for i, _ in split]
    df["domain_j"] = [j for _, j in split]
    if "alpha" not in df.columns:
        df["alpha"] = None
    df["study"] = STUDY
    keys = ["paradigm", "variant", "pair", "method", "base_kind", "alpha", "eval_domain", "group", "metric"]
    df = df.assign(_a=df["alpha"].astype(str)).drop_duplicates([*keys[:5], "_a", *keys[6:]], keep="last")
    return df[COLUMNS].reset_index(drop=True)
