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

import gc
import importlib
import sys
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


def get_executor(kind: str = "local", address: str | None = None, **kwargs: Any) -> Executor:
    """``local`` (default) or ``ray`` (needs the ``mmgrid[ray]`` extra).

    Args:
        kind: ``local`` or ``ray``.
        address: Ray cluster address (``auto``, ``ray://host:10001``); None starts a local Ray.
        **kwargs: passed to :class:`mmgrid.exec.ray.RayExecutor` (``num_cpus``, ``registry_root``).
    """
    if kind == "local":
        return LocalExecutor()
    if kind == "ray":
        from mmgrid.exec.ray import RayExecutor

        return RayExecutor(address=address, **kwargs)
    raise ConfigError(f"unknown executor {kind!r}; use local or ray.")
