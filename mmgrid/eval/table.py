"""Table 2 (MMGRid's baseline table) for the console and for the report, from the registry.

Rows are paradigms (plus SASRec and the most-popular baseline); each cell is a metric's mean over
the test users and the training seeds' replicates (in %) with its 95% percentile-bootstrap
interval (:func:`mmgrid.stats.mean_ci`: users and seeds resampled), read from the per-user values
every evaluation stores (``Registry.per_user``). The console (:func:`baseline_table`, printed by
``mmgrid eval`` / ``mmgrid demo``) and ``report.md`` (:mod:`mmgrid.render.report`) use the same cells,
names and column order (R@10, N@10, R@20, N@20). Without per-user values (an older registry) a
cell is the recorded mean over seeds, without an interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Sequence

import numpy as np
import pandas as pd

from mmgrid.errors import RegistryError
from mmgrid.stats import mean_ci

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry

PRETTY = {"text": "Text-grounded (BIGRec)", "semid": "SemID (LC-Rec)", "emb": "SemEmb (HLLM)", "sasrec": "SASRec",
          "popular": "Most popular"}
N_RESAMPLES = 2000
LEVEL = 0.95


def metric_columns(ks: Sequence[int] = (10, 20)) -> list[tuple[str, str]]:
    """(metric, short name) in the shared column order: R@10, N@10, R@20, N@20."""
    return [(f"{m}@{k}", f"{m[0].upper()}@{k}") for k in ks for m in ("recall", "ndcg")]


def newest_rows(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if df.empty:
        return df
    if "created" in df.columns:
        df = df.sort_values("created", kind="stable")
    return df.drop_duplicates(keys, keep="last")


def planned_rows(df: pd.DataFrame, keys: list[str], planned: Collection[str] | None) -> pd.DataFrame:
    """:func:`newest_rows`, except that a row whose ``id`` is in ``planned`` wins over every other
    row with the same ``keys`` (however new they are)."""
    if df.empty or not planned:
        return newest_rows(df, keys)
    df = df.assign(_planned=df["id"].isin(set(planned)))
    if "created" in df.columns:
        df = df.sort_values(["_planned", "created"], kind="stable")
    else:
        df = df.sort_values("_planned", kind="stable")
    return df.drop_duplicates(keys, keep="last").drop(columns="_planned")


def seed_number(v: Any) -> int:
    try:
        return int(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else -1
    except (TypeError, ValueError):
        return -1


class PerUser:
    """Per-user frames of result rows, read once (cached by record key)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._cache: dict[str, pd.DataFrame | None] = {}

    def frame(self, row: Any) -> pd.DataFrame | None:
        """The per-user frame of one results row, or None when the record has none (recorded before
        mmgrid kept per-user values).

        Raises:
            RegistryError (MissingBlobError, CorruptBlobError, UnsafePathError): the record names a
            per-user file that is missing, damaged or not a per-user path. Never a silently smaller
            sample: the message names the file, the evaluation and the fix (``mmgrid registry verify``,
            then evaluate again).
        """
        ref = row.get("per_user") if hasattr(row, "get") else None
        if ref is None or (isinstance(ref, float) and math.isnan(ref)) or not hasattr(self.registry, "per_user"):
            return None
        key = str(row.get("key", ref))
        if key not in self._cache:
            try:
                self._cache[key] = self.registry.per_user(row)
            except RegistryError as exc:
                what = ", ".join(f"{k}={v}" for k in ("id", "recipe_hash", "paradigm", "domain", "period", "seed",
                                                     "split", "group")
                                 if (v := row.get(k)) is not None and not (isinstance(v, float) and math.isnan(v)))
                raise type(exc)(f"{exc} (needed for the evaluation {what}; its interval and every table built "
                                "on it cannot be computed without it)") from exc
        return self._cache[key]

    def matrix(self, rows: "pd.DataFrame | list[Any]", metric: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(user_idx, values [n_rows, n_columns])`` of ``metric``, rows in the given order, columns aligned.

        A column is one evaluated example (a user may have several, see :func:`occurrence_keys`);
        examples missing from any row are dropped (the same users are evaluated on every replicate,
        so normally none is). None when a row has no per-user values or lacks the metric.
        """
        frames = []
        for r in (rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows):
            f = self.frame(r)
            if f is None or metric not in f.columns:
                return None
            frames.append(f)
        if not frames:
            return None
        first = frames[0]["user_idx"].to_numpy()
        if all(len(f) == len(first) and np.array_equal(f["user_idx"].to_numpy(), first) for f in frames):
            return first, np.stack([f[metric].to_numpy(dtype=float) for f in frames])
        keys = [occurrence_keys(f["user_idx"].to_numpy()) for f in frames]
        common = keys[0]
        for k in keys[1:]:
            common = np.intersect1d(common, k)
        pos = [np.searchsorted(k[np.argsort(k)], common) for k in keys]
        cols = [np.argsort(k)[p] for k, p in zip(keys, pos)]
        return common // KEY_SPAN, np.stack([f[metric].to_numpy(dtype=float)[c] for f, c in zip(frames, cols)])


KEY_SPAN = 4096  # a user has fewer test examples than this


def occurrence_keys(users: np.ndarray) -> np.ndarray:
    """``user * KEY_SPAN + k`` for the k-th row of each user: rows of several evaluations pair up
    by user and by the order of that user's examples (an evaluation may hold several per user)."""
    u = np.asarray(users, dtype=np.int64)
    order = np.argsort(u, kind="stable")
    su = u[order]
    start = np.r_[0, np.flatnonzero(np.diff(su)) + 1]
    occ = np.arange(u.size) - np.repeat(start, np.diff(np.r_[start, u.size]))
    keys = np.empty(u.size, dtype=np.int64)
    keys[order] = su * KEY_SPAN + occ
    return keys


def align(ua: np.ndarray, ub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column indices into two evaluations' rows that hold the same (user, k-th example), in ``ua``'s order."""
    if len(ua) == len(ub) and np.array_equal(ua, ub):
        idx = np.arange(len(ua))
        return idx, idx
    _, ia, ib = np.intersect1d(occurrence_keys(ua), occurrence_keys(ub), return_indices=True)
    order = np.argsort(ia)
    return ia[order], ib[order]


@dataclass
class Cell:
    """One table cell: the mean over users and seeds with its interval."""

    mean: float
    low: float = float("nan")
    high: float = float("nan")
    n_users: int = 0
    n_seeds: int = 0
    ids: list[str] = field(default_factory=list)


def fmt_ci(mean: float, low: float, high: float, scale: float = 100.0, digits: int = 2, sign: bool = False) -> str:
    """``12.34 [11.02, 13.70]`` (or just the mean when there is no interval; ``-`` when NaN)."""
    if mean is None or not math.isfinite(mean):
        return "-"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    text = f.format(mean * scale)
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{f.format(low * scale)}, {f.format(high * scale)}]"
    return text


def fmt_p(p: float) -> str:
    if p is None or not math.isfinite(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


# --------------------------------------------------------------------------- checkpoint cells (Table 2)


def seed_ids(registry: Registry, paradigm: str, period: str | None, variant: str = "default",
             planned: Collection[str] | None = None) -> dict[str, dict[int, str]]:
    """Domain -> {training seed -> id} of the trained checkpoint of ``period`` per seed: the one
    whose id is in ``planned`` (the grid's planned ids, :func:`mmgrid.runtime.plan.planned_ids`)
    where there is one, else the newest (another with the same coordinates, e.g. stored under an
    earlier mmgrid's id, never takes a planned one's place).

    ``popular`` (no training) has one checkpoint per domain, under seed -1.
    """
    if paradigm == "popular":
        ck = registry.query(paradigm="popular")
    else:
        ck = registry.query(paradigm=paradigm, variant=variant, kind="trained", period=period)
    if ck.empty:
        return {}
    ck = ck.copy()
    ck["seed_k"] = [seed_number(v) for v in ck["seed"]] if "seed" in ck.columns and paradigm != "popular" else -1
    ck = planned_rows(ck, ["domain", "seed_k"], planned)
    out: dict[str, dict[int, str]] = {}
    for r in ck.itertuples():
        out.setdefault(str(r.domain), {})[int(r.seed_k)] = str(r.id)
    return {d: dict(sorted(v.items())) for d, v in out.items()}


def checkpoint_rows(registry: Registry, ids: list[str], split: str, group: str = "all") -> pd.DataFrame:
    """Newest own evaluation (no study) of each checkpoint: one row per (id, metric)."""
    if not ids:
        return pd.DataFrame()
    res = registry.results(id=list(ids), split=split, group=group)
    if res.empty:
        return res
    if "study" in res.columns:
        res = res[res["study"].isna()]
    return newest_rows(res, ["id", "metric"])


class CheckpointValues:
    """Per-user values of checkpoint cells: ``values(paradigm, domain, metric) -> [n_seeds, n_users]``."""

    def __init__(self, registry: Registry, split: str, period: str | None, paradigms: list[str], variant: str = "default",
                 planned: Collection[str] | None = None):
        self.pu = PerUser(registry)
        self.ids = {p: seed_ids(registry, p, period, variant, planned) for p in paradigms}
        all_ids = [i for by in self.ids.values() for d in by.values() for i in d.values()]
        self.rows = checkpoint_rows(registry, all_ids, split)
        self._by = {(r["id"], r["metric"]): i for i, r in zip(self.rows.index, self.rows.to_dict("records"))} \
            if not self.rows.empty else {}

    def _rows(self, paradigm: str, domain: str, metric: str) -> pd.DataFrame:
        """This cell's result rows, one per seed in seed order."""
        ids = self.ids.get(paradigm, {}).get(domain, {})
        at = [self._by[(cid, metric)] for _, cid in sorted(ids.items()) if (cid, metric) in self._by]
        return self.rows.loc[at] if at else pd.DataFrame()

    def values(self, paradigm: str, domain: str, metric: str) -> tuple[np.ndarray, np.ndarray] | None:
        rows = self._rows(paradigm, domain, metric)
        return self.pu.matrix(rows, metric) if not rows.empty else None

    def cell(self, paradigm: str, domain: str, metric: str) -> Cell | None:
        rows = self._rows(paradigm, domain, metric)
        if rows.empty:
            return None
        ids = list(rows["id"])
        m = self.pu.matrix(rows, metric)
        if m is not None:
            mean, lo, hi = mean_ci(m[1], level=LEVEL, n_resamples=N_RESAMPLES, clusters=m[0])
            return Cell(mean, lo, hi, m[1].shape[1], m[1].shape[0], ids)
        vals = rows["value"].astype(float).to_numpy()
        lo = hi = float("nan")
        if len(vals) == 1 and {"ci_low", "ci_high"} <= set(rows.columns):
            lo, hi = float(rows["ci_low"].iloc[0]), float(rows["ci_high"].iloc[0])
        return Cell(float(vals.mean()), lo, hi, 0, len(vals), ids)




def baseline_frame(results: pd.DataFrame, paradigms: Sequence[str], domains: Sequence[str],
                   ks: Sequence[int] = (10, 20)) -> pd.DataFrame:
    """Wide frame of recorded means: index paradigm, columns (domain, "R@K" / "N@K"); newest result per cell.

    Args:
        results: long rows with paradigm, domain, metric, value (and created, eval_domain).
        paradigms: row order.
        domains: column order.
        ks: cut-offs shown.
    """
    df = results
    if "eval_domain" in df.columns:
        df = df[df["eval_domain"].isna() | (df["eval_domain"] == df["domain"])]
    if "created" in df.columns:
        df = df.sort_values("created")
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in metric_columns(ks)])
    out = pd.DataFrame(index=list(paradigms), columns=cols, dtype=float)
    last = df.groupby(["paradigm", "domain", "metric"])["value"].last() if not df.empty else pd.Series(dtype=float)
    for p in paradigms:
        for d in domains:
            for m, short in metric_columns(ks):
                if (p, d, m) in last.index:
                    out.loc[p, (d, short)] = float(last[(p, d, m)])
    return out


def format_table(frame: pd.DataFrame, digits: int = 2, scale: float = 100.0) -> str:
    """Markdown table of :func:`baseline_frame` in % (best value per column in bold)."""
    domains = list(dict.fromkeys(c[0] for c in frame.columns))
    sub = list(dict.fromkeys(c[1] for c in frame.columns))
    head1 = "| Paradigm | " + " | ".join(f"{d} {s}" for d in domains for s in sub) + " |"
    sep = "|---|" + "---|" * len(frame.columns)
    best = frame.max(axis=0)
    lines = [head1, sep]
    for p, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            v = row[c]
            txt = "-" if pd.isna(v) else f"{v * scale:.{digits}f}"
            cells.append(f"**{txt}**" if not pd.isna(v) and v == best[c] else txt)
        lines.append(f"| {PRETTY.get(p, p)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def baseline_cells(registry: Registry, paradigms: Sequence[str], domains: Sequence[str], *, variant: str = "default",
                   period: str | None = None, split: str = "test", ks: Sequence[int] = (10, 20),
                   with_popular: bool = True, planned: Collection[str] | None = None
                   ) -> tuple[pd.DataFrame, CheckpointValues]:
    """Table 2's cells as text (``12.34 [11.02, 13.70]``, in %): index paradigm, columns (domain, short metric);
    the checkpoints of ``planned`` (the grid's planned ids) where there are (:func:`seed_ids`)."""
    rows = list(dict.fromkeys([*paradigms, *(["popular"] if with_popular else [])]))
    cv = CheckpointValues(registry, split, period, rows, variant, planned)
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in metric_columns(ks)])
    out = pd.DataFrame(index=rows, columns=cols, dtype=object)
    for p in rows:
        for d in domains:
            for m, short in metric_columns(ks):
                c = cv.cell(p, d, m)
                if c is not None:
                    out.loc[p, (d, short)] = fmt_ci(c.mean, c.low, c.high)
    return out.dropna(how="all"), cv


def baseline_table(registry: Registry, paradigms: Sequence[str], domains: Sequence[str], *, variant: str = "default",
                   period: str | None = None, split: str = "test", group: str = "all",
                   ks: Sequence[int] = (10, 20), with_popular: bool = True,
                   planned: Collection[str] | None = None) -> str:
    """Table 2 for the console: one line per domain and paradigm, the metrics as columns (<= ~110 characters).

    The cells are those of ``report.md``'s Table 2 (:func:`baseline_cells`): mean [95% interval] in %.

    Args:
        registry: an open Registry.
        paradigms: GR paradigms and sasrec, in row order (``popular`` is appended).
        domains: domains in row-block order.
        variant: the grid row shown.
        period: the checkpoints' period (the last stage).
        split: which evaluations; ``group`` is kept for callers and must be ``all``.
        planned: the grid's planned ids, preferred over other checkpoints with the same coordinates.
    """
    cells, _ = baseline_cells(registry, paradigms, domains, variant=variant, period=period, split=split, ks=ks,
                              with_popular=with_popular, planned=planned)
    shorts = [s for _, s in metric_columns(ks)]
    if cells.empty:
        return "Table 2: no evaluated last-stage checkpoints yet."
    dw = max([6, *(len(str(d)) for d in domains)])
    pw = max(len(PRETTY.get(p, p)) for p in cells.index)
    cw = max([8, *(len(str(v)) for v in cells.to_numpy().ravel() if isinstance(v, str))])
    lines = ["Table 2: mean [95% interval] over test users and training seeds, in % (report.md adds paired tests)",
             f"{'Domain':<{dw}}  {'Paradigm':<{pw}}  " + "  ".join(f"{s:<{cw}}" for s in shorts)]
    for d in domains:
        for p in cells.index:
            vals = [cells.loc[p, (d, s)] if (d, s) in cells.columns else None for s in shorts]
            if all(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
                continue
            txt = ["-" if not isinstance(v, str) else v for v in vals]
            lines.append(f"{d:<{dw}}  {PRETTY.get(p, p):<{pw}}  " + "  ".join(f"{t:<{cw}}" for t in txt).rstrip())
    return "\n".join(lines)
