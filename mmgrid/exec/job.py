"""A job as data: a function's dotted path, JSON-able kwargs and the resources it needs.

:func:`run_job` runs one in this process; the executors (:mod:`mmgrid.exec.base`,
:mod:`mmgrid.exec.pool`, :mod:`mmgrid.exec.ray`) decide where and when. A job that runs in
another process (a Ray task, a process-pool worker) travels as JSON (:func:`job_to_json`)
and runs through :func:`run_in_worker`: in worker mode (``MMGRID_REGISTRY_WORKER=1``, so
``Registry.open`` never touches the SQLite index; the driver syncs it afterwards), in the
driver's working folder, with its result checked to be JSON-able.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from mmgrid.errors import ConfigError

WORKER_ENV = "MMGRID_REGISTRY_WORKER"  # "1" inside worker jobs: Registry.open(root) must not touch SQLite


@dataclass(frozen=True)
class Job:
    fn: str  # "package.module:function"
    kwargs: dict[str, Any] = field(default_factory=dict)  # JSON-able
    resources: dict[str, float] = field(default_factory=dict)  # e.g. {"num_cpus": 1, "num_gpus": 1}
    name: str = ""  # shown in progress output
    deps_as: str | None = None  # pass the deps' results, in order, as this keyword argument

    def __post_init__(self) -> None:
        if self.deps_as is not None and self.deps_as in self.kwargs:
            raise ConfigError(
                f"job {self.label!r}: deps_as={self.deps_as!r} is also a key of kwargs; "
                "use another name for the dependency results."
            )
        unknown = set(self.resources) - {"num_cpus", "num_gpus", "memory"}
        if unknown:
            raise ConfigError(
                f"job {self.label!r}: unknown resources {sorted(unknown)}; use num_cpus, num_gpus or memory (bytes)."
            )

    @property
    def label(self) -> str:
        """The name shown in messages: ``name`` if given, else the function path."""
        return self.name or self.fn


def resolve(fn: str) -> Callable[..., Any]:
    """Import ``"pkg.mod:func"`` (or ``"pkg.mod.func"``)."""
    mod, _, attr = fn.partition(":") if ":" in fn else fn.rpartition(".")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"job function {fn!r} cannot be imported: {exc}") from exc


def run_job(job: Job, dep_results: Sequence[Any] = ()) -> Any:
    """Run a job in this process (dependency results passed only if ``job.deps_as`` is set).

    GPU memory the job left in PyTorch's caching allocator is handed back afterwards, so
    that a long-lived worker running many jobs does not accumulate it.
    """
    kwargs = dict(job.kwargs)
    if job.deps_as is not None:
        kwargs[job.deps_as] = list(dep_results)
    try:
        return resolve(job.fn)(**kwargs)
    finally:
        release_gpu_memory()


def release_gpu_memory() -> None:
    """Free cached CUDA memory if this process used CUDA (no torch import otherwise)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    gc.collect()  # drop unreachable tensors first so their blocks can be released
    torch.cuda.empty_cache()


def job_to_json(job: Job) -> str:
    """Encode a job for a worker; fails early if its kwargs are not JSON-able."""
    data = {"fn": job.fn, "kwargs": job.kwargs, "resources": job.resources, "name": job.name, "deps_as": job.deps_as}
    try:
        return json.dumps(data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"job {job.label!r}: kwargs must be JSON-able to run in a worker (Ray, a process pool) ({exc}); pass registry ids, "
            "paths as strings and plain config dicts, never tensors or objects."
        ) from exc


def job_from_json(text: str) -> Job:
    """Inverse of :func:`job_to_json`."""
    return Job(**json.loads(text))


@contextmanager
def _worker_scope(cwd: str) -> Iterator[None]:
    """Worker-mode registry and the driver's working folder for the duration of one job."""
    old_env, old_cwd = os.environ.get(WORKER_ENV), os.getcwd()
    os.environ[WORKER_ENV] = "1"
    if cwd != old_cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old_env is None:
            os.environ.pop(WORKER_ENV, None)
        else:
            os.environ[WORKER_ENV] = old_env


def run_in_worker(job_json: str, cwd: str, *dep_results: Any) -> Any:
    """Body of every Ray task and process-pool job: decode the job, run it in worker mode, check the result."""
    job = job_from_json(job_json)
    with _worker_scope(cwd):
        result = run_job(job, dep_results)
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"job {job.label!r} returned a {type(result).__name__}, which is not JSON-able ({exc}); "
            "jobs return registry ids or small JSON values, never tensors."
        ) from exc
    return result
