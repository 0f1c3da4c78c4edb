"""Index rows -> pandas DataFrames (checkpoints, results, domain x period grids)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from mmgrid.registry.index import CK_COLS, STD

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry

CK_FRAME = ("id", "paradigm", "domain", "period", "variant", "kind", "method", "seed", "created", "n_tensors", "nbytes")
RES_FRAME = ("id", "recipe_hash", "split", "group", "metric", "value", "ci_low", "ci_high", *STD, "seed", "kind")


def _frame(rows: list[tuple], names: list[str], json_col: str, skip: set[str], tail: list[str]) -> pd.DataFrame:
    """Build one DataFrame in one go: fixed columns, one column per key found in the JSON
    column (extra coords / extra result keys), then ``tail``."""
    cols = list(zip(*rows)) if rows else [()] * len(names)
    data: dict[str, Any] = dict(zip(names, cols))
    parsed = [json.loads(t) if t and t != "{}" else None for t in data.pop(json_col)]
    keys: list[str] = []
    for d in parsed:
        for k in d or ():
            if k not in skip and k not in keys:
                keys.append(k)
    for k in keys:
        data[k] = [d.get(k) if d else None for d in parsed]
    order = [n for n in names if n != json_col and n not in tail] + keys + tail
    return pd.DataFrame({k: list(data[k]) for k in order}, columns=order)


def checkpoints_frame(rows: list[tuple]) -> pd.DataFrame:
    """Columns: id, paradigm, domain, period, variant, kind, method, seed (the training seed; None
    where the checkpoint has none), created, n_tensors, nbytes, extra coords (one column each),
    params (JSON text)."""
    return _frame(rows, list(CK_COLS), "coords", set(CK_FRAME), ["params"])


def results_frame(rows: list[tuple]) -> pd.DataFrame:
    """Columns: id, recipe_hash, split, group, metric, value, ci_low, ci_high (the stored 95%
    interval; NaN where the record has none), paradigm, domain, period, variant, seed (the
    checkpoint's training seed, or ``extra.seed`` of a recipe's evaluation), kind, one column
    per extra key (``per_user``: the per-user file), recipe (JSON text), created, key."""
    df = _frame(rows, [*RES_FRAME, "extra", "recipe", "created", "key"], "extra", set(RES_FRAME),
                ["recipe", "created", "key"])
    for col in ("value", "ci_low", "ci_high"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df


def grid_frame(reg: "Registry", paradigm: str, variant: str, value: str, split: str | None,
               group: str | None, kind: Any, seed: int | None = None) -> pd.DataFrame:
    """Domain x period table; periods in order of first creation. ``seed`` given: that training
    seed's replicate (newest checkpoint per cell). ``seed=None``: ids of the lowest seed's
    replicate; a metric's value is the mean over every seed's replicate of the cell (each
    checkpoint's newest evaluation). ``table.attrs["shows"]`` says which; the seed-pooled
    interval of each cell: :meth:`mmgrid.query.Grid.summary`."""
    ck = reg.query(paradigm=paradigm, variant=variant, kind=kind, seed=seed)
    if ck.empty:
        return pd.DataFrame()
    periods = list(dict.fromkeys(ck.sort_values("created")["period"]))
    domains = sorted(ck["domain"].unique())
    seeds = sorted({int(x) for x in ck["seed"].dropna()})
    by = ["domain", "period", "seed"] if seed is None else ["domain", "period"]
    newest = ck.assign(seed=ck["seed"].fillna(-1)).sort_values("created").groupby(by).tail(1)
    if value == "id":
        first = newest.sort_values("seed").groupby(["domain", "period"]).head(1)
        table = first.pivot(index="domain", columns="period", values="id")
        shows = f"checkpoint ids of seed {seed}" if seed is not None else (
            f"checkpoint ids of the lowest seed in each cell (seeds held: {seeds}); pass seed= for another")
    else:
        res = reg.results(id=list(newest["id"]), metric=value, split=split, group=group)
        if res.empty:
            table = pd.DataFrame(index=domains, columns=periods, dtype=float)
        else:
            last = res.sort_values("created").groupby("id").tail(1).set_index("id")["value"]
            cells = newest.assign(value=newest["id"].map(last)).groupby(["domain", "period"])["value"].mean()
            table = cells.reset_index().pivot(index="domain", columns="period", values="value")
        shows = f"{value} of seed {seed}" if seed is not None else (
            f"{value}, mean over the seeds each cell holds ({seeds}); intervals: mmgrid.query.Grid.summary")
    table = table.reindex(index=domains, columns=periods)
    table.attrs["shows"] = shows
    table.index.name, table.columns.name = "domain", "period"
    return table


def unmatched_filters(frame: pd.DataFrame, filters: dict[str, Any],
                      spell: Callable[[str, Any], str] = lambda key, value: f"{key}={value!r}") -> list[str]:
    """Why an empty answer is empty: for each filter whose value (or one of its values) no row of ``frame`` (the
    unfiltered checkpoints or results) holds, ``"<spell(key, value)> matches no row (did you mean ...?); recorded:
    ..."``, naming the recorded values. Empty when ``frame`` is empty or every value exists (then the rows holding
    them all together are what is missing, and an empty answer is right)."""
    if frame.empty:
        return []
    bad = []
    for key, want in filters.items():
        if want is None or key not in frame.columns:
            continue
        have = sorted({str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in frame[key].dropna()})
        wants = [want] if isinstance(want, (str, int, float)) else list(want)
        missing = [w for w in wants if str(w) not in have]
        if missing:
            close = difflib.get_close_matches(str(missing[0]), have, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            shown = ", ".join(have[:30]) + (" ..." if len(have) > 30 else "")
            bad.append(f"{spell(key, missing[0])} matches no row{hint}; recorded: {shown or '(none)'}")
    return bad
