"""Running jobs locally, on Ray, or one job on several processes with torchrun.

- :mod:`mmgrid.exec.base`: ``Job`` (a function's dotted path, kwargs, resources),
  ``Executor.submit(job, deps) -> Future``, ``LocalExecutor``, ``get_executor``.
- :mod:`mmgrid.exec.pool`: ``ProcessExecutor`` (a pool of local worker processes, ``exec.workers``).
- :mod:`mmgrid.exec.ray`: ``RayExecutor`` (extra ``mmgrid[ray]``).
- :mod:`mmgrid.exec.dag`: ``Dag`` and ``run_dag`` (submits in order, syncs the registry).
- :mod:`mmgrid.exec.args`: ``--executor`` / ``--workers`` / ``--address`` for commands.
- :mod:`mmgrid.exec.ddp`: torchrun helpers for one training job (rank seeding, sharding).

Importing this package imports neither torch nor ray.
"""

from mmgrid.exec.args import add_executor_args, executor_from_args, executor_from_config, job_resources
from mmgrid.exec.base import Executor, Job, LocalExecutor, get_executor, release_gpu_memory, run_job
from mmgrid.exec.dag import Dag, JobFailedError, Node, run_dag, submit_dag, sync_registry
from mmgrid.exec.pool import ProcessExecutor, WorkerDiedError

__all__ = [
    "Dag",
    "Executor",
    "Job",
    "JobFailedError",
    "LocalExecutor",
    "Node",
    "ProcessExecutor",
    "WorkerDiedError",
    "add_executor_args",
    "executor_from_args",
    "executor_from_config",
    "get_executor",
    "job_resources",
    "release_gpu_memory",
    "run_dag",
    "run_job",
    "submit_dag",
    "sync_registry",
]
