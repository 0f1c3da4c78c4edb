"""LocalExecutor, Job, Dag and run_dag: ordering, dependency results, failure propagation."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest

from mmgrid.errors import ConfigError
from mmgrid.exec import (
    Dag,
    Job,
    JobFailedError,
    LocalExecutor,
    add_executor_args,
    executor_from_args,
    get_executor,
    job_resources,
    run_dag,
    run_job,
)
from mmgrid.config import ExecConfig

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the toy job module is imported by dotted path
    sys.path.insert(0, str(HERE))

T = "exec_toyjobs"


def toy_dag(tmp_path: Path) -> Dag:
    """a=1+2, b=10+20, c=sum(a,b)+100, d after c without its result, e fails, f after e."""
    dag = Dag()
    a = dag.add("a", Job(f"{T}:add", {"a": 1, "b": 2}))
    b = dag.add("b", Job(f"{T}:add", {"a": 10, "b": 20}))
    c = dag.add("c", Job(f"{T}:total", {"extra": 100}, deps_as="deps"), deps=[a, b])
    dag.add("d", Job(f"{T}:add", {"a": 0, "b": 0}), deps=[c])
    e = dag.add("e", Job(f"{T}:boom", {"message": "planned failure"}))
    dag.add("f", Job(f"{T}:add", {"a": 5, "b": 5}), deps=[e, a])
    return dag


def toy_dag_failures(executors, tmp_path: Path) -> list[JobFailedError]:
    """The JobFailedError of :func:`toy_dag` run on each executor (job e fails by design)."""
    out = []
    for ex in executors:
        with pytest.raises(JobFailedError) as info:
            run_dag(ex, toy_dag(tmp_path), progress=False)
        out.append(info.value)
    return out


def test_local_executor_passes_dep_results_only_when_asked() -> None:
    ex = LocalExecutor()
    a = ex.submit(Job(f"{T}:add", {"a": 2, "b": 3}))
    b = ex.submit(Job(f"{T}:add", {"a": 4, "b": 5}))
    assert a.result() == 5 and b.result() == 9
    assert ex.submit(Job(f"{T}:total", {"extra": 1}, deps_as="deps"), [a, b]).result() == 15
    # Without deps_as the deps only order the job: add() would reject an extra argument.
    assert ex.submit(Job(f"{T}:add", {"a": 1, "b": 1}), [a, b]).result() == 2


def test_local_executor_propagates_failure_without_running() -> None:
    ex = LocalExecutor()
    bad = ex.submit(Job(f"{T}:boom", {"message": "x"}))
    assert isinstance(bad.exception(), ValueError)
    after = ex.submit(Job(f"{T}:boom", {"message": "must not run"}), [bad])
    assert str(after.exception()) == "x"  # the dependency's error, not this job's


def test_local_executor_waits_for_foreign_futures() -> None:
    foreign: Future = Future()
    foreign.set_result(7)
    fut = LocalExecutor().submit(Job(f"{T}:total", deps_as="deps"), [foreign])
    assert fut.result() == 7


def test_job_checks_its_fields() -> None:
    with pytest.raises(ConfigError, match="deps_as"):
        Job(f"{T}:total", {"deps": [1]}, deps_as="deps")
    with pytest.raises(ConfigError, match="num_gpu"):
        Job(f"{T}:add", resources={"gpus": 1})
    with pytest.raises(ConfigError, match="cannot be imported"):
        run_job(Job("exec_toyjobs:no_such_function"))
    with pytest.raises(ConfigError, match="cannot be imported"):
        run_job(Job("no_such_module_xyz.f"))


def test_run_dag_results_and_failure_report(tmp_path: Path) -> None:
    with pytest.raises(JobFailedError) as info:
        run_dag(LocalExecutor(), toy_dag(tmp_path), progress=False)
    err = info.value
    assert err.results == {"a": 3, "b": 30, "c": 133, "d": 0}
    assert set(err.errors) == {"e", "f"}
    msg = str(err)
    assert "1 of 6 jobs failed" in msg and "e: ValueError: planned failure" in msg
    assert "1 downstream job(s) did not run" in msg


def test_run_dag_without_failures_returns_all() -> None:
    dag = Dag()
    prev = dag.add("s0", Job(f"{T}:add", {"a": 0, "b": 1}))
    for i in range(1, 4):  # a chain: stage t after t-1, each adds its input
        prev = dag.add(f"s{i}", Job(f"{T}:total", {"extra": 1}, deps_as="deps"), deps=[prev])
    assert run_dag(LocalExecutor(), dag, progress=False) == {"s0": 1, "s1": 2, "s2": 3, "s3": 4}


def test_dag_rejects_unknown_or_duplicate_keys() -> None:
    dag = Dag()
    dag.add("a", Job(f"{T}:add", {"a": 1, "b": 1}))
    with pytest.raises(ConfigError, match="added twice"):
        dag.add("a", Job(f"{T}:add", {"a": 1, "b": 1}))
    with pytest.raises(ConfigError, match="not in the DAG yet"):
        dag.add("b", Job(f"{T}:add", {"a": 1, "b": 1}), deps=["later"])


def test_executor_args_and_resources() -> None:
    parser = argparse.ArgumentParser()
    add_executor_args(parser)
    args = parser.parse_args(["--executor", "local"])
    cfg = argparse.Namespace(exec=ExecConfig(executor="ray"), registry="runs/x/registry")
    assert isinstance(executor_from_args(args, cfg), LocalExecutor)  # the flag wins over the file
    assert parser.parse_args(["--executor", "ray", "--address", "auto"]).address == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--executor", "slurm"])
    ec = ExecConfig(num_gpus_per_train=1, num_cpus_per_job=4)
    assert job_resources(ec, "train") == {"num_cpus": 4, "num_gpus": 1}
    assert job_resources(ec, "eval") == {"num_cpus": 4}
    with pytest.raises(ConfigError, match="negative"):
        ExecConfig(num_gpus_per_eval=-1)
    with pytest.raises(ConfigError, match="unknown executor"):
        get_executor("slurm")


def test_worker_env_name_matches_the_registry() -> None:
    """The Ray executor sets the variable Registry.open reads (no ray import needed)."""
    from mmgrid.exec.ray import WORKER_ENV
    from mmgrid.registry.api import WORKER_ENV as REGISTRY_WORKER_ENV

    assert WORKER_ENV == REGISTRY_WORKER_ENV == "MMGRID_REGISTRY_WORKER"


def test_importing_mmgrid_exec_is_light() -> None:
    import subprocess

    code = (
        "import sys, mmgrid.exec, mmgrid.exec.ray, mmgrid.exec.ddp; "
        "print(sorted({'torch', 'ray'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE.parents[1],
                         check=True)
    assert out.stdout.strip() == "[]"
