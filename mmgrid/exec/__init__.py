"""Running jobs locally or on Ray (see base.py)."""

from mmgrid.exec.base import Executor, Job, LocalExecutor, get_executor, run_job

__all__ = ["Executor", "Job", "LocalExecutor", "get_executor", "run_job"]
