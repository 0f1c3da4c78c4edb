"""A DAG of jobs, run on any executor, with the registry index synced on the driver.

Builders describe their work as a :class:`Dag` (stage t after t-1, merges after their
inputs, the lambda regression after the sweeps) and hand it to :func:`run_dag`::

    dag = Dag()
    pre = dag.add("emb/Video_Games/pretrain", Job("mmgrid.train.stage:run_stage", {...}))
    p1 = dag.add("emb/Video_Games/p1", Job("mmgrid.train.stage:run_stage", {...}), deps=[pre])
    ids = run_dag(executor, dag, registry_root="runs/amazon2023/registry")

A dependency must be added before the node that needs it, so insertion order is a
topological order and a cycle cannot be expressed. That order is also the submission
order, which the in-process :class:`~mmgrid.exec.base.LocalExecutor` relies on.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from tqdm import tqdm

from mmgrid.errors import ConfigError, MmgridError
from mmgrid.exec.base import Executor, Job
from mmgrid.registry.api import Registry


class JobFailedError(MmgridError, RuntimeError):
    """One or more jobs of a DAG failed; what finished is kept (``results``) and indexed."""

    def __init__(self, message: str, results: dict[str, Any], errors: dict[str, BaseException]) -> None:
        super().__init__(message)
        self.results, self.errors = results, errors


@dataclass(frozen=True)
class Node:
    key: str  # unique name of the job in the DAG (e.g. "emb/Books/p1")
    job: Job
    deps: tuple[str, ...] = ()  # keys of nodes that must finish first (their results go to job.deps_as)


@dataclass
class Dag:
    """Jobs with dependencies, kept in insertion (= topological) order."""

    nodes: dict[str, Node] = field(default_factory=dict)

    def add(self, key: str, job: Job, deps: Sequence[str] = ()) -> str:
        """Add a job that runs after ``deps``; returns ``key`` (to use as a later dep).

        Raises:
            ConfigError: if ``key`` is taken or a dep has not been added yet.
        """
        if key in self.nodes:
            raise ConfigError(f"DAG: job key {key!r} is added twice; each job needs its own key.")
        missing = [d for d in deps if d not in self.nodes]
        if missing:
            raise ConfigError(
                f"DAG: job {key!r} depends on {missing}, which are not in the DAG yet; add dependencies first."
            )
        self.nodes[key] = Node(key, job, tuple(deps))
        return key

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())


def submit_dag(executor: Executor, dag: Dag) -> dict[str, Future]:
    """Submit every node in topological order; returns key -> future (nothing is waited for)."""
    futures: dict[str, Future] = {}
    for node in dag:
        futures[node.key] = executor.submit(node.job, [futures[d] for d in node.deps])
    return futures


def run_dag(
    executor: Executor,
    dag: Dag,
    registry_root: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Run a DAG to completion and return each job's result by key.

    After every job has finished (or failed), the driver indexes what the workers wrote
    into the registry's SQLite index (``reg.sync()``): workers never write the index
    themselves. This happens before any failure is raised, so no finished checkpoint
    is lost from the index.

    Args:
        executor: where the jobs run (local or Ray).
        dag: the jobs and their dependencies.
        registry_root: the registry to sync; defaults to ``executor.registry_root`` if set.
        progress: show a tqdm bar (None: only on a terminal).

    Returns:
        key -> the job's JSON-able result.

    Raises:
        JobFailedError: if a job failed; jobs downstream of it did not run.
    """
    futures = submit_dag(executor, dag)
    try:
        _wait_all(futures, progress)
    except KeyboardInterrupt:
        cancel = getattr(executor, "cancel", None)
        if cancel is not None:  # Ray tasks would otherwise keep running without a driver
            cancel()
        raise
    root = registry_root if registry_root is not None else getattr(executor, "registry_root", None)
    if root is not None:
        sync_registry(root)
    results = {k: f.result() for k, f in futures.items() if f.exception() is None}
    errors = {k: f.exception() for k, f in futures.items() if f.exception() is not None}
    if errors:
        raise JobFailedError(_failure_message(dag, errors), results, errors)  # type: ignore[arg-type]
    return results


def _wait_all(futures: dict[str, Future], progress: bool | None) -> None:

    pending = set(futures.values())
    with tqdm(total=len(pending), desc="jobs", unit="job", disable=None if progress is None else not progress) as bar:
        while pending:
            done, pending = wait(pending, return_when="FIRST_COMPLETED")
            bar.update(len(done))


def sync_registry(root: str | os.PathLike[str]) -> int:
    """Index, on the driver, the manifests and results that workers wrote; returns the changes."""

    return int(Registry.open(os.fspath(root)).sync() or 0)


def _failure_message(dag: Dag, errors: dict[str, BaseException]) -> str:
    """Name the jobs that failed by themselves and count those skipped because an input failed."""
    own = [k for k in errors if not any(d in errors for d in dag.nodes[k].deps)]
    skipped = len(errors) - len(own)
    lines = [f"{len(own)} of {len(dag)} jobs failed:"]
    lines += [f"  {k}: {type(errors[k]).__name__}: {_summary(errors[k])}" for k in own]
    if skipped:
        lines.append(f"  {skipped} downstream job(s) did not run because an input failed.")
    lines.append("Finished checkpoints are kept in the registry; fix the cause and rerun (finished jobs are cached).")
    return "\n".join(lines)


def _summary(exc: BaseException) -> str:
    text = str(exc).strip()
    # Ray prefixes the task name and a traceback; the cause's own message is the last line.
    last = text.splitlines()[-1] if text else ""
    return last[:300]
