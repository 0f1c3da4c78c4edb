"""Job functions for the executor tests (imported by dotted path, also inside Ray workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def add(a: int, b: int) -> int:
    return a + b


def total(deps: list[int], extra: int = 0) -> int:
    """Sum of the dependency results (asked for with ``Job(..., deps_as="deps")``)."""
    return sum(deps) + extra


def boom(message: str) -> None:
    raise ValueError(message)


def write_after(marker: str, delay: float) -> str:
    """Sleep, then create ``marker``: a dependent that sees the file ran after us."""
    time.sleep(delay)
    Path(marker).write_text("done")
    return marker


def saw_marker(marker: str) -> bool:
    return Path(marker).exists()


def environment() -> dict[str, Any]:
    return {"worker": os.environ.get("MMGRID_REGISTRY_WORKER"), "cwd": os.getcwd()}


def not_json() -> object:
    return object()


def put_checkpoint(root: str, domain: str, value: float) -> dict[str, Any]:
    """Write a one-tensor checkpoint into the registry (worker mode on Ray)."""
    import torch

    from mmgrid import Registry

    reg = Registry.open(root)
    coords = {"paradigm": "toy", "domain": domain, "period": "p1", "variant": "default"}
    cid = reg.put({"w": torch.full((2, 2), value)}, coords, "trained", seed=0, config_hash="toy")
    return {"id": cid, "indexed": reg.indexed, "sqlite": (Path(root) / "index.sqlite").exists()}


def stamp(delay: float, marker: str = "") -> dict[str, Any]:
    """Sleep ``delay`` seconds; return when this ran (wall clock) and where (pid); write ``marker`` if given."""
    start = time.time()
    time.sleep(delay)
    if marker:
        Path(marker).write_text("ran")
    return {"start": start, "end": time.time(), "pid": os.getpid()}


def worker_env() -> dict[str, Any]:
    """What a process-pool worker sets up around a job (see mmgrid.exec.pool)."""
    keys = ("MMGRID_REGISTRY_WORKER", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MMGRID_PROGRESS", "MMGRID_QUIET")
    return {k: os.environ.get(k) for k in keys} | {"cwd": os.getcwd(), "pid": os.getpid()}


def die() -> None:
    """The worker process is killed (SIGKILL), as by the out-of-memory killer."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def unknown_name(name: str) -> None:
    """Raise a named error whose __init__ takes other arguments than its message."""
    from mmgrid.errors import UnknownNameError

    raise UnknownNameError("paradigm", name, ["emb", "semid", "text"])


def pid_then_sleep(marker: str, delay: float) -> None:
    """Write this worker's pid to ``marker``, then sleep ``delay`` seconds (a long job)."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(delay)
