"""Jobs as data, executors that run them.

A :class:`Job` names a function by dotted path (``"mmgrid.train.build:run_stage"``) with
JSON-able keyword arguments and the resources it needs; it returns a JSON-able value
(typically registry ids, never tensors). ``Executor.submit(job, deps)`` returns a
``concurrent.futures.Future``; a job starts only after the futures in ``deps`` are done.
"""

from __future__ import annotations

import importlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from mmgrid.errors import ConfigError


@dataclass(frozen=True)
class Job:
    fn: str  # "package.module:function"
    kwargs: dict[str, Any] = field(default_factory=dict)  # JSON-able
    resources: dict[str, float] = field(default_factory=dict)  # e.g. {"num_cpus": 1, "num_gpus": 1}
    name: str = ""  # shown in progress output


def resolve(fn: str) -> Callable[..., Any]:
    """Import ``"pkg.mod:func"`` (or ``"pkg.mod.func"``)."""
    mod, _, attr = fn.partition(":") if ":" in fn else fn.rpartition(".")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"job function {fn!r} cannot be imported: {exc}") from exc


def run_job(job: Job) -> Any:
    """Run a job in this process."""
    return resolve(job.fn)(**job.kwargs)


class Executor(Protocol):
    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future: ...

    def shutdown(self) -> None: ...


class LocalExecutor:
    """Runs each job in this process, in submission order (deps are therefore done)."""

    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future:
        fut: Future = Future()
        for d in deps:
            exc = d.exception()
            if exc is not None:
                fut.set_exception(exc)
                return fut
        try:
            fut.set_result(run_job(job))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(exc, KeyboardInterrupt):
                raise
            fut.set_exception(exc)
        return fut

    def shutdown(self) -> None:
        return None


def get_executor(kind: str = "local", address: str | None = None, **kwargs: Any) -> Executor:
    """``local`` (default) or ``ray`` (needs the ``mmgrid[ray]`` extra)."""
    if kind == "local":
        return LocalExecutor()
    if kind == "ray":
        from mmgrid.exec.ray import RayExecutor

        return RayExecutor(address=address, **kwargs)
    raise ConfigError(f"unknown executor {kind!r}; use local or ray.")
