"""Per-user metric values of an evaluation: one content-addressed parquet file per evaluation.

Layout under the registry root::

    peruser/ab/ab12...ef.parquet   name = sha256 of the file's bytes

Columns: ``user_idx`` (int64, one row per evaluated example, in the evaluator's order),
``active`` (bool: the user is active in the evaluation's activity phase, MMGRid section
4.3), then one float64 column per metric (``recall@10``, ``ndcg@10``, ...). Every result
record of the evaluation (one per user group) names the file in ``extra.per_user``, the
path relative to the registry root, so a table can be re-aggregated, bootstrapped or
tested later without running a model again. The mean of a metric's column over a group's
rows is the recorded ``value`` (the same float operations: see
:func:`mmgrid.eval.metrics.per_user_metrics`).

A file is written to ``tmp/``, fsynced and renamed into place (``fileio.atomic.atomic_write``);
the same values give the same bytes and so the same file (stored once). Reading checks
that the referenced path is ``peruser/<2 hex>/<sha256>.parquet`` (nothing outside the
root can be named) and that the bytes hash to the name.

Each record also stores ``ci: {metric: [low, high]}``: the 95% percentile-bootstrap
interval of the group's mean over its users (:func:`mmgrid.stats.mean_ci`, 2000
resamples, seed 0), computed when the record is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

import mmgrid.registry.results as results_io
from mmgrid.registry.errors import CorruptBlobError, MissingBlobError, RegistryError, UnsafePathError
from mmgrid.fileio.atomic import atomic_write
from mmgrid.stats import mean_ci

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

DIR = "peruser"
REL_RE = re.compile(r"^peruser/([0-9a-f]{2})/([0-9a-f]{64})\.parquet$")
CI_LEVEL, CI_RESAMPLES, CI_SEED = 0.95, 2000, 0
GROUP_FILTERS = {"all": None, "active": True, "non_active": False}


def group_mask(active: np.ndarray, group: str) -> np.ndarray:
    """Rows of a group: ``all``, ``active`` or ``non_active`` (MMGRid section 4.3)."""
    if group not in GROUP_FILTERS:
        raise RegistryError(f"per-user values exist for the groups {list(GROUP_FILTERS)}, not {group!r}.")
    want = GROUP_FILTERS[group]
    active = np.asarray(active, dtype=bool)
    return np.ones(len(active), dtype=bool) if want is None else active == want


def check_columns(users: Any, active: Any, metrics: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Validated arrays of one evaluation's per-user values (before anything is written).

    Raises:
        RegistryError: lengths differ, no metric, a metric named like a fixed column, or a NaN/Inf value.
    """
    u = np.asarray(users, dtype=np.int64).reshape(-1)
    a = np.asarray(active, dtype=bool).reshape(-1)
    if len(a) != len(u):
        raise RegistryError(f"per-user values: {len(u)} users but {len(a)} active flags; give one flag per user.")
    if not metrics:
        raise RegistryError("per-user values: no metric columns; give {'recall@10': array, ...}.")
    out: dict[str, np.ndarray] = {}
    for name, values in metrics.items():
        if name in ("user_idx", "active"):
            raise RegistryError(f"per-user values: metric name {name!r} clashes with a fixed column; rename it.")
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if len(v) != len(u):
            raise RegistryError(f"per-user values: metric {name!r} has {len(v)} values for {len(u)} users.")
        if not np.isfinite(v).all():
            raise RegistryError(f"per-user values: metric {name!r} holds NaN or Inf; per-user metrics are finite.")
        out[str(name)] = v
    return u, a, out


def to_parquet(users: np.ndarray, active: np.ndarray, metrics: Mapping[str, np.ndarray]) -> bytes:
    """The parquet bytes of one evaluation (pyarrow, no pandas metadata: the same values give the same bytes)."""
    # lazy: pyarrow.parquet (~0.6 s) is needed only when an evaluation is recorded, not by `import mmgrid.registry`
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"user_idx": pa.array(users, pa.int64()), "active": pa.array(active, pa.bool_()),
                      **{k: pa.array(v, pa.float64()) for k, v in metrics.items()}})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def rel_path(data: bytes) -> str:
    """The path (relative to the registry root) parquet bytes are stored under."""
    sha = hashlib.sha256(data).hexdigest()
    return f"{DIR}/{sha[:2]}/{sha}.parquet"


def write(root: Path, tmp: Path, data: bytes, durable: bool = True) -> str:
    """Store parquet bytes content-addressed; returns the path relative to ``root``."""
    rel = rel_path(data)
    path = Path(root) / rel
    if path.exists():
        return rel
    atomic_write(path, data, tmp, durable)
    return rel


def resolve(root: Path, rel: Any) -> Path:
    """The file a record's ``extra.per_user`` names, refusing anything but ``peruser/xx/<sha256>.parquet``.

    Raises:
        UnsafePathError: the path is absolute, leaves the root (``..``) or is not a per-user file name.
    """
    m = REL_RE.match(rel) if isinstance(rel, str) else None
    if m is None or m.group(1) != m.group(2)[:2]:
        raise UnsafePathError(
            f"per-user path {rel!r} is not of the form peruser/<2 hex>/<sha256>.parquet under the registry root, "
            "so it could name a file outside the registry; the results file holding it was edited: restore it "
            "from a backup (`mmgrid registry verify ROOT` lists every bad reference)."
        )
    return Path(root) / rel


_READ: "OrderedDict[str, pd.DataFrame]" = OrderedDict()  # the last READ_KEEP frames read, by file
READ_KEEP = 2048


def read(root: Path, rel: Any) -> "pd.DataFrame":
    """The per-user frame a record names, its hash checked (a copy of it, once read).

    The files are content-addressed (named by their sha256, never rewritten), so a frame read and
    checked once is kept for this process (the last :data:`READ_KEEP`): a report reads the same
    evaluation for several tables and tests (the full demo: 2080 reads of 980 files). A file that
    is gone since is reported missing; one corrupted since is caught by ``mmgrid registry verify``.

    Raises:
        UnsafePathError, MissingBlobError, CorruptBlobError.
    """
    path = resolve(root, rel)
    key = str(path.resolve())
    hit = _READ.get(key)
    if hit is not None and path.exists():  # a file deleted since (gc, by hand) is reported missing
        _READ.move_to_end(key)
        return hit.copy()
    df = _read_checked(path)
    _READ[key] = df
    if len(_READ) > READ_KEEP:
        _READ.popitem(last=False)
    return df.copy()


def _read_checked(path: Path) -> "pd.DataFrame":
    import pyarrow.parquet as pq  # lazy: pyarrow.parquet (~0.6 s) only when per-user values are read

    root = path.parent.parent.parent
    fix = (f"run `mmgrid registry verify {root}` to list every damaged or missing file, then evaluate the "
           "checkpoint again (or restore the file from a backup)")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MissingBlobError(f"per-user file {path} is missing; {fix}.") from None
    got = hashlib.sha256(data).hexdigest()
    if got != path.stem:
        raise CorruptBlobError(f"per-user file {path} is corrupt (its sha256 is {got}, not its name); {fix}.")
    try:
        return pq.read_table(io.BytesIO(data)).to_pandas()
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types; the bytes hash to the name
        raise CorruptBlobError(f"per-user file {path} is not a readable parquet file ({exc}); {fix}.") from exc


def check(path: Path) -> bool:
    """Does a per-user file still hash to its name?"""
    return hashlib.sha256(path.read_bytes()).hexdigest() == path.stem


def iter_files(root: Path) -> list[Path]:
    return sorted((Path(root) / DIR).glob("*/*.parquet"))


def intervals(active: np.ndarray, metrics: Mapping[str, np.ndarray], group: str,
              users: np.ndarray | None = None) -> dict[str, list[float]]:
    """``{metric: [ci_low, ci_high]}`` of a group's mean: :func:`mmgrid.stats.mean_ci` (95%, 2000
    resamples, seed 0) drawing whole users (``users``: the user of each row; a user may have
    several test examples), the same bootstrap the report uses, so the stored interval and the
    report's agree. ``mean_ci`` caches its draws per shape and seed, so the metrics of one group
    share one draw."""
    mask = group_mask(active, group)
    if not mask.any():
        return {}
    clusters = None if users is None else np.asarray(users)[mask]
    return {k: [float(x) for x in mean_ci(np.asarray(v, dtype=np.float64)[mask], CI_LEVEL, CI_RESAMPLES, CI_SEED,
                                          clusters=clusters)[1:]]
            for k, v in metrics.items()}


def of_record(root: Path, rows: list[tuple], key: str) -> "pd.DataFrame":
    """The per-user rows of a result record's group, from its index rows (``Index.result_rows``)."""
    if not rows:
        raise RegistryError(f"no result record with key {key!r} in {root}; take keys from reg.results().")
    extra = json.loads(rows[0][-4] or "{}")
    if not extra.get("per_user"):
        raise RegistryError(f"result record {key} has no per-user values (recorded before mmgrid kept them); "
                            "evaluate again to get them.")
    df = read(root, extra["per_user"])
    return df[group_mask(df["active"].to_numpy(), rows[0][3])].reset_index(drop=True)


def references(root: Path) -> dict[str, list[str]]:
    """``extra.per_user`` value -> keys of the records naming it, over every results file."""
    refs: dict[str, list[str]] = {}
    for path in results_io.iter_files(root):
        for rec in results_io.read_lines(path)[0]:
            rel = (rec.get("extra") or {}).get("per_user") if isinstance(rec.get("extra"), dict) else None
            if rel is not None:
                refs.setdefault(rel if isinstance(rel, str) else repr(rel), []).append(str(rec.get("key")))
    return refs
