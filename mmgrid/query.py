"""Querying a built grid from Python: lineage both ways, seed-pooled summaries with intervals,
the best checkpoint per cell, lambda* per domain, tidy exports, and loading a trained model.

Open a run (the folder ``mmgrid demo --out`` or ``mmgrid build`` leaves, holding
``mmgrid-run.yaml``) or a bare registry::

    from mmgrid.query import Grid
    g = Grid.open("runs/demo")                  # or Grid.open("runs/demo/registry")
    g.summary("recall@10", by=["paradigm", "domain"])   # mean over seeds and users, 95% interval
    g.best("recall@10", by=["domain"])          # the best trained checkpoint per domain
    g.lambda_star()                             # lambda* per domain and group, interval, edge flag
    g.descendants("books-best")                 # stored merges and recorded in-memory merges
    g.export("results.csv")                     # one tidy row per recorded value (.parquet too)

Intervals are percentile-bootstrap intervals over test users and training seeds
(:func:`mmgrid.stats.bootstrap.mean_ci`: users are drawn with all their examples, and seeds are
drawn too), from the per-user values each evaluation stores; a row without per-user values gets
no interval (NaN), never a narrower one.
"""

from __future__ import annotations


import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pandas as pd

from mmgrid.config.grid import GridConfig
from mmgrid.config.runfile import RUN_FILE, find_run, load_run, read_run, run_registry
from mmgrid.data.dataset import load_prepared
from mmgrid.errors import ConfigError, RegistryError
from mmgrid.eval.table import PerUser
from mmgrid.paradigms import get_paradigm
from mmgrid.registry import Registry
from mmgrid.registry.frames import unmatched_filters
from mmgrid.runtime.checkpoints import load_checkpoint
from mmgrid.stats.bootstrap import mean_ci
from mmgrid.sweep.compare.runs import CompareSpec, Comparison, compare_runs
from mmgrid.sweep.evidence import robust_stars, temporal_curves

if TYPE_CHECKING:
    from mmgrid.sweep.rolling import RollingStudy

LEVEL = 0.95
RESAMPLES = 2000

__all__ = ["Grid", "load_model"]


@dataclass
class Grid:
    """A registry, with the grid config of the run that built it when one was saved."""

    registry: Registry
    config: GridConfig | None = None  # of the saved run, or None for a bare registry

    @classmethod
    def open(cls, path: str | Path) -> "Grid":
        """Open a run folder (with ``mmgrid-run.yaml``) or a registry folder.

        A run folder's paths are relative to it (:mod:`mmgrid.config.runfile`): a moved or copied
        run opens its own registry.

        Raises:
            RegistryError: ``path`` is neither (nothing is created), or the run's registry is
                missing, not a registry, or a symlink loop.
            ConfigError: the run file is unreadable or one of its paths leaves the run unannounced.
        """
        p = Path(path)
        run = find_run(p)
        if (p / "manifests").is_dir():
            return cls(Registry.open(p), load_run(run) if run is not None else None)
        if run is None:
            raise RegistryError(f"{path} is neither a registry (no manifests/ folder) nor a run folder ({RUN_FILE}); "
                                "pass the folder `mmgrid demo --out` or `mmgrid build` wrote, or its registry.")
        return cls(Registry.open(run_registry(read_run(run))), load_run(run))

    # -- lineage -------------------------------------------------------------------------
    def _edges(self) -> pd.DataFrame:
        """parent, child, role, child_kind, stored (True: a checkpoint; False: an in-memory merge
        recorded only by its evaluation, ``child`` = its recipe hash), study, method."""
        ids = list(self.registry.query()["id"])
        res = self.registry.results()
        state = (len(ids), hash(tuple(sorted(ids))), len(res))  # what the edges are built from: a sync() changes it
        if getattr(self, "_edge_cache", None) is not None and getattr(self, "_edge_state", None) == state:
            return self._edge_cache
        self._edge_state: tuple[int, int, int] = state
        rows = []
        for cid in ids:
            m = self.registry.get(cid)
            for par in m.parents:
                rows.append({"parent": par.id, "child": m.id, "role": par.role, "child_kind": m.kind,
                             "stored": True, "study": None, "method": m.method})
        mem = res[res["id"].isna() & res["recipe"].notna()].drop_duplicates("recipe_hash") if not res.empty else res
        for r in mem.itertuples():
            rec = json.loads(r.recipe)
            bases = rec.get("base")
            bases = [] if bases is None else ([bases] if isinstance(bases, str) else list(bases))
            ins = [(i, role) for i, role in zip(rec.get("inputs", []), rec.get("roles") or ["merge_input"] * 99)]
            if rec.get("method") == "single":  # an evaluation of one checkpoint, not a merge
                continue
            for pid, role in ins + [(b, "merge_base") for b in bases]:
                rows.append({"parent": pid, "child": r.recipe_hash, "role": role, "child_kind": "in-memory merge",
                             "stored": False, "study": getattr(r, "study", None), "method": rec.get("method")})
        self._edge_cache: pd.DataFrame = pd.DataFrame(rows, columns=["parent", "child", "role", "child_kind", "stored", "study",
                                                       "method"]).drop_duplicates()
        return self._edge_cache

    def children(self, ref: Any) -> pd.DataFrame:
        """What was made directly from ``ref`` (id, prefix or alias): stored checkpoints and
        in-memory merges recorded by the studies, one row each (``stored`` tells them apart)."""
        cid = self.registry.resolve(ref)
        e = self._edges()
        return e[e["parent"] == cid].reset_index(drop=True)

    def descendants(self, ref: Any) -> pd.DataFrame:
        """Everything made from ``ref``, at any depth (the rows of :meth:`children`, with ``depth``)."""
        return _walk(self._edges(), self.registry.resolve(ref), "parent", "child")

    def ancestors(self, ref: Any) -> pd.DataFrame:
        """Every checkpoint ``ref`` was made from (a stored checkpoint's id, or the recipe hash of
        an in-memory merge): parent, child, role, depth."""
        e = self._edges()
        try:
            start = self.registry.resolve(ref)
        except RegistryError:
            if ref not in set(e["child"]):
                raise
            start = ref
        return _walk(e, start, "child", "parent")

    # -- results -------------------------------------------------------------------------
    def results(self, **filters: Any) -> pd.DataFrame:
        """The registry's result rows (see :meth:`mmgrid.registry.api.Registry.results`)."""
        return self.registry.results(**filters)

    def summary(self, metric: str, by: Iterable[str] = ("paradigm", "domain", "period"), split: str = "test",
                group: str = "all", kind: str | None = "trained", variant: str | None = "default",
                level: float = LEVEL, **filters: Any) -> pd.DataFrame:
        """One row per cell of ``by``: the metric's mean over seeds and users with its interval.

        Each cell pools its rows (one per training seed, the newest evaluation of each
        checkpoint): ``value`` is the mean, ``ci_low``/``ci_high`` the ``level`` interval of
        :func:`mmgrid.stats.bootstrap.mean_ci` over users and seeds; ``seeds`` lists them.
        """
        by = list(by)
        res = self.registry.results(metric=metric, split=split, group=group, kind=kind, variant=variant, **filters)
        cols = [*by, "value", "ci_low", "ci_high", "n_users", "seeds", "ids"]
        if res.empty:
            _check_filters(self.registry, {"metric": metric, "split": split, "group": group, "kind": kind,
                                           "variant": variant, **filters})
            return pd.DataFrame(columns=cols)
        unknown = [b for b in by if b not in res.columns]
        if unknown:
            raise ConfigError(f"summary(by=...): {unknown} are not result columns; use some of {list(res.columns)}.")
        key = res["id"].fillna(res["recipe_hash"])
        res = res.assign(_k=key).sort_values("created").groupby("_k").tail(1)
        pu = PerUser(self.registry)
        rows = []
        for cell, g in res.groupby(by, dropna=False, sort=True):
            cell = cell if isinstance(cell, tuple) else (cell,)
            got = pu.matrix(g, metric)
            if got is None:
                mean, lo, hi, n = float(g["value"].mean()), math.nan, math.nan, 0
            else:
                mean, lo, hi = mean_ci(got[1], level=level, n_resamples=RESAMPLES, clusters=got[0])
                n = int(len(np.unique(got[0])))
            rows.append({**dict(zip(by, cell)), "value": mean, "ci_low": lo, "ci_high": hi, "n_users": n,
                         "seeds": sorted({int(s) for s in g["seed"].dropna()}), "ids": list(g["_k"])})
        return pd.DataFrame(rows, columns=cols)

    def best(self, metric: str, by: Iterable[str] = ("domain",), among: Iterable[str] = ("paradigm", "period"),
             **kw: Any) -> pd.DataFrame:
        """The best cell of ``among`` within each cell of ``by`` (e.g. the best paradigm and period
        per domain) by its seed-pooled mean, with its interval and the runner-up's; ``ids``: the
        checkpoints (one per seed) of the winner. Ties go to the first in sorted order."""
        by, among = list(by), list(among)
        s = self.summary(metric, by=[*by, *among], **kw)
        if s.empty:
            return s
        out = []
        for _, g in s.groupby(by, sort=True):
            g = g.sort_values("value", ascending=False, kind="stable")
            row = g.iloc[0].to_dict()
            row["runner_up"] = float(g.iloc[1]["value"]) if len(g) > 1 else math.nan
            out.append(row)
        return pd.DataFrame(out).reset_index(drop=True)

    def compare(self, other: "Grid | str | Path", metric: str = "ndcg@10", split: str = "test", group: str = "all",
                level: float = 0.95, **filters: str) -> Comparison:
        """This run (A) against ``other`` (B), cell by cell, paired per user: ``.rows`` one row per paired cell
        (A - B with its interval over users and seeds, sign-flip p, Holm over the cells), ``.unpaired`` the
        cells that cannot be paired and why (:mod:`mmgrid.sweep.compare.runs`; as text:
        :func:`mmgrid.render.compare.comparison_text`).

        ``filters``: cell coordinates to keep (``kind``, ``paradigm``, ``domain``, ``period``, ``variant``,
        ``study``; ``study="none"``: only the checkpoints' own evaluations).
        """
        b = other if isinstance(other, Grid) else Grid.open(other)
        spec = CompareSpec(metric, split, group, dict(filters), level)
        return compare_runs(self.registry, b.registry, spec)

    def lambda_star(self, paradigm: str | None = None, variant: str | None = None, metric: str | None = None,
                    smooth: int | None = None) -> pd.DataFrame:
        """lambda* of the temporal study per (domain, group): the argmax of the seed-averaged
        curve (MMGRid Eq. 10), its 95% interval over users and seeds, ``on_edge`` when it sits on
        the swept grid's edge. Defaults: the saved run's ``sweeps.temporal`` (else emb, default,
        ndcg@10, no smoothing)."""
        t = self.config.sweeps.temporal if self.config is not None else None
        paradigm = paradigm or (t.paradigm if t else "emb")
        variant = variant or (t.variant if t else "default")
        metric = metric or (t.metric if t else "ndcg@10")
        smooth = smooth if smooth is not None else (t.smooth if t else 1)
        curves = temporal_curves(self.registry, paradigm, variant, metric)
        if not curves:
            raise ConfigError(f"no temporal sweep of {paradigm}/{variant} with per-user {metric} is recorded in "
                              f"{self.registry.root}; run `mmgrid sweep temporal RUN` first.")
        return robust_stars(curves, smooth)

    def rolling(self, paradigm: str | None = None, variant: str | None = None, metric: str | None = None
                ) -> RollingStudy:
        """The rolling deployment study (``mmgrid sweep rolling``) read back: a
        :class:`~mmgrid.sweep.rolling.RollingStudy` (``rows``: per strategy, window and metric the mean with its
        95% interval and the paired difference to lambda = 1 with Holm's p; ``matrices``; ``transfer``: BWT, FWT,
        forgetting; ``verdicts``). Defaults: the saved run's ``sweeps.temporal``."""
        from mmgrid.sweep.rolling import rolling_study  # lazy: the study only when asked for

        t = self.config.sweeps.temporal if self.config is not None else None
        study = rolling_study(self.registry, paradigm or (t.paradigm if t else "emb"),
                              variant or (t.variant if t else "default"), metric or (t.metric if t else "ndcg@10"))
        if study.empty:
            raise ConfigError(f"no rolling deployment is recorded in {self.registry.root}; run "
                              "`mmgrid sweep rolling RUN` first.")
        return study

    def grid(self, paradigm: str, metric: str = "id", seed: int | None = None, **kw: Any) -> pd.DataFrame:
        """:meth:`Registry.grid` (domain x period); ``attrs["shows"]`` says which seed(s) it shows."""
        return self.registry.grid(paradigm, value=metric, seed=seed, **kw)

    def export(self, path: str | Path, **filters: Any) -> Path:
        """Write the result rows (tidy: one recorded value per row) to ``path``: ``.csv`` or
        ``.parquet``; returns the path."""
        p = Path(path)
        df = self.registry.results(**filters).drop(columns=["per_user", "key"], errors="ignore")
        if p.suffix == ".parquet":
            df.to_parquet(p, index=False)
        elif p.suffix == ".csv":
            df.to_csv(p, index=False)
        else:
            raise ConfigError(f"{path}: write .csv or .parquet.")
        return p

    def load_model(self, ref: Any, domain: str | None = None) -> Any:
        """The trained model of a checkpoint (see :func:`load_model`)."""
        return load_model(self.registry, ref, domain, self.config)


def load_model(registry: Registry, ref: Any, domain: str | None = None, config: GridConfig | None = None) -> Any:
    """Load a checkpoint into its paradigm's model, ready to rank ``domain``'s items (default:
    its own): the loader for every paradigm, emb and sasrec included (whose tensors no Hugging
    Face auto class opens). Needs the prepared data the run used (``config.prepared``, else the
    ``prepared/`` folder beside the registry).

    Raises:
        ConfigError: no prepared data found, or the domain is not in it.
    """
    m = registry.get(ref)
    where = Path(config.prepared_dir) if config is not None else registry.root.parent / "prepared"
    if not (where / "manifest.json").exists() and not where.is_dir():
        raise ConfigError(f"no prepared data at {where}; open the run with Grid.open(RUN) or pass config=.")
    prepared = load_prepared(where)
    domain = domain or m.coords.get("domain")
    if domain not in prepared.domains:
        raise ConfigError(f"domain {domain!r} is not in {where} ({prepared.domains}); pass domain=.")
    par = get_paradigm(m.coords["paradigm"])
    params = (config.paradigm_params.get(par.name, {}) if config is not None else {})
    return par.load(load_checkpoint(registry, m.id), prepared.domain(domain), params)


def _check_filters(registry: Registry, filters: dict[str, Any]) -> None:
    """A filter that matches nothing: name each one whose value no result row holds, with the values that exist
    (:func:`mmgrid.registry.frames.unmatched_filters`)."""
    bad = unmatched_filters(registry.results(), filters)
    if bad:
        raise ConfigError("summary: " + "; ".join(bad) + ".")


def _walk(edges: pd.DataFrame, start: str, here: str, there: str) -> pd.DataFrame:
    """Breadth-first over the lineage edges from ``start``: each step takes the edges whose
    ``here`` column is in the frontier and moves to their ``there`` column (parent -> child for
    descendants, child -> parent for ancestors); rows carry their ``depth`` (1 = direct)."""
    out, frontier, seen, depth = [], {start}, {start}, 0
    while frontier:
        depth += 1
        step = edges[edges[here].isin(frontier)]
        if step.empty:
            break
        out.append(step.assign(depth=depth))
        frontier = set(step[there]) - seen
        seen |= frontier
    return pd.concat(out, ignore_index=True) if out else edges.head(0).assign(depth=pd.Series(dtype=int))
