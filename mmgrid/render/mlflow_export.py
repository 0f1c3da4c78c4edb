"""``mmgrid export mlflow ROOT --tracking-uri URI``: the grid and its studies as MLflow runs.

* every checkpoint is a run: its coordinates, kind, method and seed as tags (``mmgrid.*``), its
  training or merge parameters as params (nested keys joined with dots), its own evaluations as
  metrics ``SPLIT/GROUP/METRIC`` (``@`` written ``_at_``, recall and NDCG as recorded, fractions
  0-1) with ``..._ci_low`` / ``..._ci_high``; its lineage as tags ``mmgrid.parent.<role>`` (the
  parents' ids) and, for its first parent, MLflow's own parent link (``mlflow.parentRunId``), so
  the runs table nests base -> stages -> merges;
* every study (temporal, cross-domain, lambda_hat; one per paradigm and variant) is a parent run,
  and each merge it evaluated (a recipe, never stored as a checkpoint) a child run with the
  merge's coordinates (domain or pair, method, base, lambda or alpha, seed) as tags and its
  results, per evaluated domain, as metrics.

Idempotent: a run is found again by its ``mmgrid.key`` tag, and only what it lacks is logged, so a
second export adds nothing and an export after new evaluations adds just those. A local store
(``sqlite:///mlflow.db``, browsed offline with ``mlflow ui --backend-store-uri sqlite:///mlflow.db``)
needs no network. Needs the ``mlflow`` extra (``pip install 'mmgrid[mlflow]'``).

Before anything is logged the target is checked: a ``sqlite:`` file that exists must be an SQLite
database; an ``http(s):`` server must accept a connection within :data:`CONNECT_TIMEOUT_S` seconds,
and each request of the export then waits at most :data:`REQUEST_TIMEOUT_S` seconds, without
retries (MLflow's ``MLFLOW_HTTP_REQUEST_TIMEOUT`` / ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, unless set).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse
from typing import TYPE_CHECKING, Any, Iterable

from mmgrid.errors import MmgridError

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry

KEY_TAG = "mmgrid.key"
STUDY_COORDS = ("domain", "pair", "domain_i", "domain_j", "method", "base_kind", "alpha", "lambda", "seed", "variant",
                "paradigm")
MAX_PARAM = 6000  # MLflow's limit on one param value (2.x)
CONNECT_TIMEOUT_S = 5.0  # an http(s) tracking server must accept a connection within this
REQUEST_TIMEOUT_S = 30  # then each request waits at most this long ...
REQUEST_RETRIES = 0  # ... and is not retried
SQLITE_MAGIC = b"SQLite format 3\x00"


class ExportError(MmgridError):
    """The export cannot run (mlflow missing, a bad tracking URI ...)."""


@dataclass
class ExportSummary:
    """What one export added."""

    runs_created: int = 0
    runs_found: int = 0
    metrics_logged: int = 0
    params_logged: int = 0
    tags_logged: int = 0
    experiment_id: str = ""
    seconds: float = 0.0

    @property
    def added(self) -> int:
        return self.runs_created + self.metrics_logged + self.params_logged + self.tags_logged


def _client(tracking_uri: str) -> Any:
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", tracking_uri):
        raise ExportError(f"--tracking-uri {tracking_uri!r}: expected a URI such as sqlite:///mlflow.db or "
                          "file:///path/mlruns.")
    check_target(tracking_uri)  # before mlflow is imported (seconds): a bad target fails at once
    try:
        from mlflow.tracking import MlflowClient  # lazy: mlflow (~2 s, an optional extra) only for this command
    except ImportError as exc:
        raise ExportError("`mmgrid export mlflow` needs mlflow: pip install 'mmgrid[mlflow]'.") from exc
    return MlflowClient(tracking_uri=tracking_uri)


def check_target(tracking_uri: str) -> None:
    """Refuse a target the export cannot use, before anything is logged (see the module docstring).

    Raises:
        ExportError: a sqlite file that is not a database (or whose folder is missing), an http(s) server
            that does not accept a connection within :data:`CONNECT_TIMEOUT_S` seconds.
    """
    u = urlparse(tracking_uri)
    if u.scheme == "sqlite":
        path = Path(tracking_uri.split(":///", 1)[1]) if ":///" in tracking_uri else None
        if path is None or not str(path):
            raise ExportError(f"--tracking-uri {tracking_uri!r}: expected sqlite:///relative/path.db or "
                              "sqlite:////absolute/path.db.")
        if path.exists():
            try:
                with path.open("rb") as f:
                    head = f.read(len(SQLITE_MAGIC))
            except OSError as exc:
                raise ExportError(f"--tracking-uri {tracking_uri!r}: cannot read {path} ({exc}).") from exc
            if path.is_dir() or (head and head != SQLITE_MAGIC):
                raise ExportError(f"--tracking-uri {tracking_uri!r}: {path} exists and is not an SQLite database; "
                                  "name a new file (it is created) or an MLflow database.")
        elif not path.parent.is_dir():
            raise ExportError(f"--tracking-uri {tracking_uri!r}: the folder {path.parent} does not exist; create it "
                              "or name a database in an existing folder.")
    elif u.scheme in ("http", "https"):
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            with socket.create_connection((u.hostname or "", port), timeout=CONNECT_TIMEOUT_S):
                pass
        except OSError as exc:
            raise ExportError(f"--tracking-uri {tracking_uri!r}: no MLflow server answered at {u.hostname}:{port} "
                              f"within {CONNECT_TIMEOUT_S:g} s ({exc}); start it (`mlflow server`) or export to a "
                              "local store, e.g. sqlite:///mlflow.db.") from exc


@contextlib.contextmanager
def _bounded_requests():
    """MLflow's HTTP requests bounded for the export (unless the caller set the variables)."""
    set_here = {k: v for k, v in (("MLFLOW_HTTP_REQUEST_TIMEOUT", str(REQUEST_TIMEOUT_S)),
                                  ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(REQUEST_RETRIES))) if k not in os.environ}
    os.environ.update(set_here)
    try:
        yield
    finally:
        for k in set_here:
            os.environ.pop(k, None)


def export_mlflow(registry: Registry, tracking_uri: str, experiment: str = "mmgrid") -> ExportSummary:
    """Export every checkpoint and study of ``registry`` to the MLflow store at ``tracking_uri``.

    Returns:
        What was added (all zero on a second export of an unchanged registry).
    """
    with _bounded_requests():
        try:
            return _export(registry, tracking_uri, experiment)
        except MmgridError:
            raise
        except Exception as exc:  # mlflow's, sqlalchemy's and requests' errors: the store, not the registry
            if not type(exc).__module__.split(".")[0] in ("mlflow", "sqlalchemy", "requests", "urllib3", "alembic"):
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ExportError(f"export to {tracking_uri!r} failed: {first[:300]}; check the tracking URI (a local "
                              "store: sqlite:///mlflow.db) and rerun (the export resumes: what was logged is kept "
                              "and found again).") from exc


def _export(registry: Registry, tracking_uri: str, experiment: str) -> ExportSummary:
    t0 = time.perf_counter()
    client = _client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
    out = ExportSummary(experiment_id=str(exp_id))
    sync = _Experiment(client, exp_id, _existing_runs(client, exp_id), out)
    runs: dict[str, str] = {}  # mmgrid key -> run id
    res = registry.results()
    own = res[res["id"].notna() & (res["study"].isna() if "study" in res.columns else True)] if not res.empty else res
    for m in _parents_first([registry.get(i) for i in registry.query()["id"]]):
        first = next((runs.get(p.id) for p in m.parents if p.id in runs), None)
        tags = {"mmgrid.id": m.id, "mmgrid.kind": m.kind, **{f"mmgrid.{k}": v for k, v in m.coords.items()}}
        if m.seed is not None:
            tags["mmgrid.seed"] = m.seed
        if m.method:
            tags["mmgrid.method"] = m.method
        for p in m.parents:
            role = f"mmgrid.parent.{p.role}"
            tags[role] = f"{tags[role]},{p.id}" if role in tags else p.id
        if first is not None:
            tags["mlflow.parentRunId"] = first
        name = "/".join(str(m.coords.get(k)) for k in ("paradigm", "domain", "period") if m.coords.get(k) is not None)
        variant = m.coords.get("variant", "default")
        name += (f"/{variant}" if variant != "default" else "") + (f" seed {m.seed}" if m.seed is not None else "")
        rows = own[own["id"] == m.id] if not own.empty else own
        runs[m.id] = sync.sync_run(f"checkpoint:{m.id}", name, tags, _flat(m.params),
                                   _metrics(rows, with_domain=False))
    if not res.empty and "study" in res.columns:
        studies = res[res["study"].notna() & res["recipe_hash"].notna()]
        for (study, paradigm, variant), srows in studies.groupby(["study", "paradigm", "variant"], dropna=False):
            skey = f"study:{study}:{paradigm}:{variant}"
            parent = sync.sync_run(skey, f"study {study} {paradigm}/{variant}",
                                  {"mmgrid.study": study, "mmgrid.paradigm": paradigm, "mmgrid.variant": variant}, {}, {})
            for (recipe, seed), rrows in srows.groupby(["recipe_hash", srows["seed"].astype(str)], dropna=False):
                r0 = rrows.iloc[0]
                tags = {"mmgrid.study": study, "mmgrid.recipe_hash": recipe, "mlflow.parentRunId": parent}
                tags.update({f"mmgrid.{c}": r0[c] for c in STUDY_COORDS if c in rrows.columns and _present(r0[c])})
                inputs = _recipe_inputs(r0.get("recipe"))
                if inputs:
                    tags["mmgrid.parent.merge_input"] = ",".join(inputs)
                label = " ".join(f"{c}={tags[f'mmgrid.{c}']}" for c in ("domain", "pair", "method", "base_kind", "alpha",
                                                                         "lambda", "seed") if f"mmgrid.{c}" in tags)
                sync.sync_run(f"recipe:{recipe}:{seed}", f"{study} {label}", tags,
                             _recipe_params(r0.get("recipe")), _metrics(rrows, with_domain=True))
    out.seconds = time.perf_counter() - t0
    return out


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and str(v) != "nan"


def _parents_first(manifests: list[Any]) -> list[Any]:
    """Manifests ordered so that every parent comes before its children (then by creation time)."""
    by = {m.id: m for m in manifests}
    done: set[str] = set()
    out: list[Any] = []

    def visit(m: Any) -> None:
        stack = [(m, False)]
        while stack:
            cur, expanded = stack.pop()
            if cur.id in done:
                continue
            if expanded:
                done.add(cur.id)
                out.append(cur)
                continue
            stack.append((cur, True))
            stack += [(by[p.id], False) for p in cur.parents if p.id in by and p.id not in done]

    for m in sorted(manifests, key=lambda x: x.created):
        visit(m)
    return out


def _existing_runs(client: Any, exp_id: str) -> dict[str, Any]:
    """mmgrid key -> the run already in the experiment (data: metrics, params, tags)."""
    out: dict[str, Any] = {}
    token = None
    while True:
        page = client.search_runs([exp_id], max_results=1000, page_token=token)
        for r in page:
            k = r.data.tags.get(KEY_TAG)
            if k:
                out[k] = r
        token = getattr(page, "token", None)
        if not token:
            return out


@dataclass
class _Experiment:
    """One experiment being synced: the client, its id, its runs by ``mmgrid.key`` and the running summary."""

    client: Any
    exp_id: str
    existing: dict[str, Any]
    out: ExportSummary

    def sync_run(self, key: str, name: str, tags: dict[str, Any], params: dict[str, Any],
                 metrics: dict[str, float]) -> str:
        return _sync_run(self, key, name, tags, params, metrics)


def _sync_run(exp: _Experiment, key: str, name: str, tags: dict[str, Any], params: dict[str, Any],
              metrics: dict[str, float]) -> str:
    """Create the run ``key`` (or find it) and log whatever of tags/params/metrics it lacks; returns its id."""
    from mlflow.entities import Metric, Param, RunTag  # lazy: mlflow, as in _client

    client, exp_id, existing, out = exp.client, exp.exp_id, exp.existing, exp.out
    tags = {k: _text(v, 5000) for k, v in tags.items()}
    run = existing.get(key)
    if run is None:
        run = client.create_run(exp_id, tags={KEY_TAG: key, "mlflow.runName": name}, run_name=name)
        client.set_terminated(run.info.run_id)
        have_m, have_p, have_t = {}, {}, {KEY_TAG: key, "mlflow.runName": name}
        existing[key] = run
        out.runs_created += 1
    else:
        have_m, have_p, have_t = run.data.metrics, run.data.params, run.data.tags
        out.runs_found += 1
    rid = run.info.run_id
    now = int(time.time() * 1000)
    new_m = [Metric(k, float(v), now, 0) for k, v in metrics.items() if k not in have_m]
    new_p = [Param(k, _text(v, MAX_PARAM)) for k, v in params.items() if k not in have_p]
    new_t = [RunTag(k, v) for k, v in tags.items() if have_t.get(k) != v]
    for chunk in _chunks(new_m, 1000):
        client.log_batch(rid, metrics=chunk)
    for chunk in _chunks(new_p, 100):
        client.log_batch(rid, params=chunk)
    for chunk in _chunks(new_t, 100):
        client.log_batch(rid, tags=chunk)
    out.metrics_logged += len(new_m)
    out.params_logged += len(new_p)
    out.tags_logged += len(new_t)
    return rid


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _text(v: Any, limit: int) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else str(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as ``a.b.c`` keys (MLflow params are flat)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        else:
            out[_metric_name(key)] = v
    return out


def _metric_name(text: str) -> str:
    """A name MLflow accepts (letters, digits, ``_ - . space /``): ``recall@10`` -> ``recall_at_10``."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", str(text).replace("@", "_at_"))


def _metrics(rows: Any, with_domain: bool) -> dict[str, float]:
    """``SPLIT/GROUP[/EVAL_DOMAIN]/METRIC`` -> value (and ``_ci_low``/``_ci_high``), newest record per key."""
    out: dict[str, float] = {}
    if rows is None or rows.empty:
        return out
    rows = rows.sort_values("created") if "created" in rows.columns else rows
    for r in rows.to_dict("records"):
        parts = [r["split"], r["group"]]
        ed = r.get("eval_domain")
        if _present(ed) and (with_domain or ed != r.get("domain")):
            parts.append(f"on_{ed}")
        key = _metric_name("/".join(map(str, [*parts, r["metric"]])))
        for suffix, col in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high")):
            v = r.get(col)
            if _present(v) and math.isfinite(float(v)):
                out[key + suffix] = float(v)
    return out


def _recipe(recipe: Any) -> dict[str, Any]:
    if not isinstance(recipe, str):
        return {}
    try:
        d = json.loads(recipe)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _recipe_inputs(recipe: Any) -> list[str]:
    return [str(i) for i in _recipe(recipe).get("inputs") or []]


def _recipe_params(recipe: Any) -> dict[str, Any]:
    d = _recipe(recipe)
    return _flat({k: v for k, v in d.items() if k != "inputs"})
