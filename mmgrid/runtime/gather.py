"""Waiting for a study's executor jobs: results in submission order, one progress bar, the index synced.

The baseline evaluation, the temporal sweep and the cross-domain sweep each submit independent jobs
(:mod:`mmgrid.exec`) and need the same end: every job's result in the order it was submitted, progress
while they finish, and the registry's SQLite index brought up to date on the driver (workers write
files only) once no job is running any more, even when one of them failed.
"""

from __future__ import annotations

from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any, Callable, Sequence

from mmgrid.runtime.progress import progress as progress_bar

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


def gather(futures: Sequence[Future], registry: Registry | None = None, desc: str = "jobs", unit: str = "job",
           enabled: bool = True, on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """The futures' results in submission order.

    Args:
        futures: the submitted jobs' futures.
        registry: synced (``registry.sync()``) after every job has finished, failed or not.
        desc, unit, enabled: the progress bar's label, unit and switch.
        on_result: called with (position, result) as each result is taken, in order (e.g. to print a line).

    Raises:
        The first failed job's exception (in submission order), after the others have finished and the
        registry was synced.
    """
    out: list[Any] = []
    bar = progress_bar(total=len(futures), desc=desc, unit=unit, enabled=enabled, leave=True, min_interval=0.0)
    try:
        for i, fut in enumerate(futures):
            out.append(fut.result())
            if on_result is not None:
                on_result(i, out[-1])
            bar.update(1)
        return out
    finally:
        bar.close()
        wait(futures)  # what the other jobs record is indexed too
        if registry is not None and hasattr(registry, "sync"):
            registry.sync()
