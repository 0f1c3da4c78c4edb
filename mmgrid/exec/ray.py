"""Run jobs as Ray Core tasks (optional extra ``mmgrid[ray]``).

Each :class:`~mmgrid.exec.job.Job` becomes one ``ray.remote`` task with the job's
resources (``num_cpus``, ``num_gpus``, ``memory``). Dependencies are handed to Ray as
``ObjectRef`` arguments, so Ray itself orders the lineage DAG (stage t after t-1, merges
after their inputs, the lambda regression after the sweeps) and skips a task whose input
failed. What travels between tasks is the jobs' JSON-able return values (registry ids),
never tensors: checkpoints go through the registry on a shared filesystem.

Inside a task:

- ``MMGRID_REGISTRY_WORKER=1`` is set while the job runs. ``Registry.open`` honours it by
  opening in worker mode (blobs, manifests and results files only, never the SQLite
  index), so a shared filesystem without reliable SQLite locking (NFS, Lustre) is safe.
  The driver indexes what the workers wrote with ``reg.sync()`` (see
  :func:`mmgrid.exec.dag.run_dag`).
- The job runs in the driver's working folder when that folder exists on the worker
  (a local Ray, or a cluster with the same shared mount), so relative paths in a grid
  YAML mean the same thing as locally.
- Plugins (:mod:`mmgrid.plugins`) are found as in any process: the task reads the installed
  distributions' entry points on its first lookup, so a plugin package installed where the
  workers run (or on a ``PYTHONPATH`` given in ``runtime_env``) is there.
- CUDA memory is released after the job (``torch.cuda.empty_cache()``), and a GPU task's
  worker process exits after one task (``max_calls=1``), which also frees the CUDA
  context.
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import Future
from typing import Any, Sequence

from mmgrid.errors import ConfigError
from mmgrid.exec.job import WORKER_ENV, Job, job_from_json, job_to_json, run_in_worker

# WORKER_ENV, job_to_json, job_from_json and run_in_worker live in mmgrid.exec.job (shared with the process pool)
__all__ = ["WORKER_ENV", "RayExecutor", "job_from_json", "job_to_json", "run_in_worker"]


def _import_ray() -> Any:
    try:
        import ray  # lazy: the optional extra mmgrid[ray] (~1-2 s), needed only by a RayExecutor
    except ImportError as exc:
        raise ConfigError(
            "executor 'ray' needs Ray: install the optional extra with pip install 'mmgrid[ray]', "
            "or use --executor local."
        ) from exc
    return ray


class RayExecutor:
    """Submit jobs as Ray tasks; futures are ``concurrent.futures.Future``.

    Args:
        address: an existing cluster (``auto``, ``ray://head:10001``); None starts a local
            Ray unless one is already initialised in this process.
        num_cpus: CPUs of a local Ray started here (ignored when joining a cluster).
        registry_root: the registry the jobs write to; the driver syncs its index after the
            jobs finish (:func:`mmgrid.exec.dag.run_dag`).
        runtime_env: Ray runtime environment of this executor's tasks (e.g.
            ``{"env_vars": {"PYTHONPATH": ...}}``); applied per task, so it also works when
            Ray was already initialised.
    """

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        registry_root: str | None = None,
        runtime_env: dict[str, Any] | None = None,
    ) -> None:
        ray = _import_ray()
        self.registry_root = registry_root
        self._started = False
        if not ray.is_initialized():
            ray.init(
                address=address,
                num_cpus=num_cpus if address is None else None,
                include_dashboard=False,
            )
            self._started = True  # we shut down only the Ray we started
        self._runtime_env = runtime_env
        # A local Ray cannot grow: a job asking for more than it has would wait forever.
        self._capacity = dict(ray.cluster_resources()) if address is None else None
        self._task = ray.remote(run_in_worker)
        # Ray allows max_calls only on the remote function, not in .options(): a second one
        # for GPU jobs, whose worker process then exits after one task (freeing the CUDA context).
        self._gpu_task = ray.remote(max_calls=1)(run_in_worker)
        self._refs: weakref.WeakKeyDictionary[Future, Any] = weakref.WeakKeyDictionary()
        self._waits_on: weakref.WeakKeyDictionary[Future, list[Future]] = weakref.WeakKeyDictionary()

    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future:
        """Submit ``job`` to run after ``deps``; returns a future of its result.

        A dependency that failed makes the returned future fail with the same error,
        and the job does not run (as with :class:`~mmgrid.exec.base.LocalExecutor`).
        """
        ray = _import_ray()
        dep_refs = []
        for d in deps:
            ref = self._refs.get(d)
            if ref is None:  # a future from elsewhere: wait for it and pass its value
                exc = d.exception()
                if exc is not None:
                    failed: Future = Future()
                    failed.set_exception(exc)
                    return failed
                ref = ray.put(d.result())
            dep_refs.append(ref)
        opts = self._options(job)
        self._check_capacity(job, opts)
        if self._runtime_env:
            opts["runtime_env"] = self._runtime_env
        task = self._gpu_task if "num_gpus" in opts else self._task
        ref = task.options(**opts).remote(job_to_json(job), os.getcwd(), *dep_refs)
        fut = ref.future()
        self._refs[fut] = ref
        if dep_refs:
            self._waits_on[fut] = list(deps)
        return fut

    @staticmethod
    def _options(job: Job) -> dict[str, Any]:
        res = job.resources
        opts: dict[str, Any] = {"num_cpus": res.get("num_cpus", 1), "name": job.label[:100]}
        if res.get("num_gpus"):
            opts["num_gpus"] = res["num_gpus"]
        if res.get("memory"):
            opts["memory"] = res["memory"]
        return opts

    def _check_capacity(self, job: Job, opts: dict[str, Any]) -> None:
        if self._capacity is None:
            return
        for key, ray_key in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            have = self._capacity.get(ray_key, 0.0)
            if opts.get(key, 0) > have:
                raise ConfigError(
                    f"job {job.label!r} asks for {key}={opts[key]} but this Ray has {have:g} {ray_key}; lower "
                    f"exec.{'num_gpus_per_train / num_gpus_per_eval' if ray_key == 'GPU' else 'num_cpus_per_job'} "
                    "or join a bigger cluster with --address."
                )

    def cancel(self) -> int:
        """Stop every submitted job that has not finished (e.g. on Ctrl-C); returns how many.

        Jobs whose dependencies are all done (running or ready) are cancelled directly; a job
        still waiting on a dependency then fails with that dependency's cancellation.
        (Cancelling a waiting dependent as well trips an internal reference-count check in
        Ray 2.x that aborts the driver.)
        """
        ray = _import_ray()
        pending = [(fut, ref) for fut, ref in list(self._refs.items()) if not fut.done()]
        for fut, ref in pending:
            if all(d.done() for d in self._waits_on.get(fut, ())):
                ray.cancel(ref)
        return len(pending)

    def shutdown(self) -> None:
        """Shut Ray down if this executor started it."""
        if self._started:
            _import_ray().shutdown()
            self._started = False

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
