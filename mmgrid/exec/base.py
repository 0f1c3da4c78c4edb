"""Jobs as data, executors that run them.

A :class:`Job` names a function by dotted path (``"mmgrid.train.stage:run_stage"``) with
JSON-able keyword arguments and the resources it needs; it returns a JSON-able value
(typically registry ids, never tensors). ``Executor.submit(job, deps)`` returns a
``concurrent.futures.Future``; a job starts only after the futures in ``deps`` are done,
and fails without running (with the dependency's exception) when one of them failed.

Dependencies order jobs; their results reach a job only when it asks for them with
``Job(..., deps_as="name")``: the job function then receives ``name=[result of deps[0],
result of deps[1], ...]`` as one more keyword argument. The same rule holds for every
executor, so a job behaves the same locally and on Ray.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol, Sequence

from mmgrid.errors import ConfigError
from mmgrid.exec.job import Job, release_gpu_memory, resolve, run_job
from mmgrid.exec.pool import ProcessExecutor, default_workers
from mmgrid.exec.ray import RayExecutor  # imports no ray until a RayExecutor is made

__all__ = ["Executor", "Job", "LocalExecutor", "ProcessExecutor", "RayExecutor", "get_executor", "release_gpu_memory",
           "resolve", "run_job"]


class Executor(Protocol):
    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future: ...

    def shutdown(self) -> None: ...


class LocalExecutor:
    """Runs each job in this process, in submission order (deps are therefore done)."""

    registry_root: str | None = None  # jobs run in the driver: nothing to sync

    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future:
        fut: Future = Future()
        for d in deps:
            exc = d.exception()  # futures of this executor are done; others are waited for
            if exc is not None:
                fut.set_exception(exc)
                return fut
        try:
            fut.set_result(run_job(job, [d.result() for d in deps]))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(exc, KeyboardInterrupt):
                raise
            fut.set_exception(exc)
        return fut

    def shutdown(self) -> None:
        return None

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def get_executor(kind: str = "local", address: str | None = None, workers: int = 1, **kwargs: Any) -> Executor:
    """``local`` (default) or ``ray`` (needs the ``mmgrid[ray]`` extra).

    Args:
        kind: ``local`` or ``ray``.
        address: Ray cluster address (``auto``, ``ray://host:10001``); None starts a local Ray.
        workers: local only (``exec.workers``): 1 runs jobs in this process
            (:class:`LocalExecutor`), N > 1 in a pool of N processes
            (:class:`~mmgrid.exec.pool.ProcessExecutor`), 0 in one process per usable CPU.
        **kwargs: passed to :class:`mmgrid.exec.ray.RayExecutor` (``num_cpus``, ``registry_root``);
            a process pool takes ``registry_root`` only.
    """
    if kind == "local":
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ConfigError(f"exec.workers: {workers!r}; use 1 (this process), N > 1 processes or 0 (one per CPU).")
        n = workers or default_workers()
        if n == 1:
            return LocalExecutor()
        return ProcessExecutor(n, registry_root=kwargs.get("registry_root"))
    if kind == "ray":
        return RayExecutor(address=address, **kwargs)
    raise ConfigError(f"unknown executor {kind!r}; use local or ray.")
