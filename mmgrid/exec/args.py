"""Command-line helpers: ``--executor`` / ``--workers`` / ``--address`` for any command that runs jobs.

In a command's ``register``::

    add_executor_args(p)

and in its handler, after loading the grid::

    executor = executor_from_args(args, cfg)
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Literal

from mmgrid.exec.base import Executor, get_executor

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.config import GridConfig
    from mmgrid.config import ExecConfig


def add_executor_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--executor {local,ray}``, ``--workers N``, ``--address ADDR`` and ``--num-cpus N`` to ``parser``."""
    g = parser.add_argument_group("execution")
    g.add_argument(
        "--executor",
        choices=["local", "ray"],
        default=None,
        help="where jobs run: local (this process, the default) or ray (needs mmgrid[ray]); "
        "overrides the grid's exec.executor",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="local executor: run N jobs side by side in N worker processes (0: one per CPU; 1: one at a time "
        "in this process). Pays for many single-threaded jobs; every worker loads its own data, so memory grows "
        "with N. Results and checkpoint ids do not depend on it. Overrides the grid's exec.workers",
    )
    g.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="Ray cluster to join (auto, ray://head:10001); default: start a local Ray",
    )
    g.add_argument("--num-cpus", type=int, default=None, metavar="N", help="CPUs of a local Ray started here")


def executor_from_args(args: argparse.Namespace, cfg: "GridConfig") -> Executor:
    """The executor the command line and the grid's ``exec:`` section ask for.

    Command-line flags win over the grid file. A Ray executor or a local process pool is told
    the grid's registry so that :func:`mmgrid.exec.dag.run_dag` syncs its index on the driver.
    """
    return executor_from_config(
        cfg,
        kind=getattr(args, "executor", None),
        address=getattr(args, "address", None),
        num_cpus=getattr(args, "num_cpus", None),
        workers=getattr(args, "workers", None),
    )


def executor_from_config(
    cfg: "GridConfig",
    kind: str | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    workers: int | None = None,
) -> Executor:
    """The executor of ``cfg.exec``, with any of its settings overridden (None keeps the file's).

    Local: ``exec.workers`` 1 gives a :class:`LocalExecutor`, more a
    :class:`~mmgrid.exec.pool.ProcessExecutor` (0: one process per usable CPU).
    """
    # lazy: mmgrid.config imports yaml (~0.05 s, -X importtime), which the command-line parser that imports
    # this module must not load
    from mmgrid.config import ExecConfig
    from mmgrid.configtools import check_flag

    check_flag("--num-cpus", num_cpus, ExecConfig, "num_cpus", "exec.num_cpus")
    check_flag("--workers", workers, ExecConfig, "workers", "exec.workers")
    kind = kind or cfg.exec.executor
    if kind == "local":
        return get_executor("local", workers=workers if workers is not None else cfg.exec.workers,
                            registry_root=cfg.registry)
    return get_executor(
        kind,
        address or cfg.exec.address,
        num_cpus=num_cpus if num_cpus is not None else cfg.exec.num_cpus,
        registry_root=cfg.registry,
    )


def job_resources(exec_cfg: "ExecConfig", kind: Literal["train", "eval", "cpu"]) -> dict[str, Any]:
    """Resources for a job of ``kind`` from the grid's ``exec:`` section (for ``Job.resources``).

    Args:
        exec_cfg: ``cfg.exec``.
        kind: ``train`` (a training stage), ``eval`` (an evaluation or sweep point) or
            ``cpu`` (merges, regressions: no GPU).
    """
    res: dict[str, Any] = {"num_cpus": exec_cfg.num_cpus_per_job}
    gpus = {"train": exec_cfg.num_gpus_per_train, "eval": exec_cfg.num_gpus_per_eval}.get(kind, 0.0)
    if gpus:
        res["num_gpus"] = gpus
    return res
