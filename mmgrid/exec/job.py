"""A job as data: a function's dotted path, JSON-able kwargs and the resources it needs.

:func:`run_job` runs one in this process; the executors (:mod:`mmgrid.exec.base`,
:mod:`mmgrid.exec.ray`) decide where and when.
"""

from __future__ import annotations

import gc
import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

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
