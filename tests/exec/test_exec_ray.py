"""RayExecutor gives the same results as LocalExecutor: ordering by deps, dependency
results, failure propagation, worker-mode registry writes synced by the driver.

One local Ray (``ray.init(num_cpus=2)``) is shared by every test of this module.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'mmgrid[ray]')")

from mmgrid.errors import ConfigError  # noqa: E402
from mmgrid.exec import Dag, Job, LocalExecutor, get_executor, run_dag  # noqa: E402
from mmgrid.exec.ray import WORKER_ENV, RayExecutor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from test_exec_base import toy_dag_failures  # noqa: E402

T = "exec_toyjobs"
# Ray workers do not inherit pytest's sys.path: hand them the toy jobs' folder (and the repo).
_PATH = os.pathsep.join(p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH")) if p)
ENV = {"env_vars": {"PYTHONPATH": _PATH}}


@pytest.fixture(scope="module")
def ray_executor() -> RayExecutor:
    """A local Ray with 2 CPUs; workers find the toy jobs and mmgrid through PYTHONPATH."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False)
    yield RayExecutor(runtime_env=ENV)
    if started:
        ray.shutdown()


def test_dag_on_ray_equals_local(ray_executor: RayExecutor, tmp_path: Path) -> None:
    outcomes = toy_dag_failures((LocalExecutor(), ray_executor), tmp_path)
    local, remote = outcomes
    assert remote.results == local.results == {"a": 3, "b": 30, "c": 133, "d": 0}
    assert set(remote.errors) == set(local.errors) == {"e", "f"}
    # Ray re-raises a task's error as a subclass of the original type, downstream too.
    assert all(isinstance(e, ValueError) for e in remote.errors.values())
    assert "planned failure" in str(remote.errors["f"])
    assert "1 of 6 jobs failed" in str(remote)


def test_ray_orders_by_deps(ray_executor: RayExecutor, tmp_path: Path) -> None:
    marker = str(tmp_path / "first.done")
    first = ray_executor.submit(Job(f"{T}:write_after", {"marker": marker, "delay": 1.0}))
    # Two CPUs are free: without the dependency the check would run at once and see nothing.
    second = ray_executor.submit(Job(f"{T}:saw_marker", {"marker": marker}), [first])
    unordered = ray_executor.submit(Job(f"{T}:saw_marker", {"marker": marker + ".never"}))
    assert second.result(timeout=60) is True
    assert unordered.result(timeout=60) is False


def test_ray_tasks_run_in_worker_mode_in_the_driver_folder(ray_executor: RayExecutor) -> None:
    remote = ray_executor.submit(Job(f"{T}:environment")).result(timeout=60)
    assert remote == {"worker": "1", "cwd": os.getcwd()}
    assert os.environ.get(WORKER_ENV) is None  # the driver itself is never in worker mode
    assert LocalExecutor().submit(Job(f"{T}:environment")).result()["worker"] is None


def test_ray_refuses_tensors_and_objects(ray_executor: RayExecutor) -> None:
    with pytest.raises(ConfigError, match="JSON-able"):
        ray_executor.submit(Job(f"{T}:add", {"a": object(), "b": 1}))
    fut = ray_executor.submit(Job(f"{T}:not_json"))
    with pytest.raises(ConfigError, match="not JSON-able"):
        fut.result(timeout=60)


def test_get_executor_joins_the_running_ray(ray_executor: RayExecutor) -> None:
    ex = get_executor("ray", registry_root="runs/x/registry", runtime_env=ENV)
    assert isinstance(ex, RayExecutor) and ex.registry_root == "runs/x/registry"
    ex.shutdown()  # did not start Ray, so leaves it running
    assert ray.is_initialized()
    assert ex.submit(Job(f"{T}:add", {"a": 1, "b": 1})).result(timeout=60) == 2
    assert isinstance(ex.submit(Job(f"{T}:add", {"a": 1})).exception(timeout=60), TypeError)


def test_executor_from_the_command_line_or_the_grid(ray_executor: RayExecutor) -> None:
    import argparse

    from mmgrid.config import load_grid
    from mmgrid.exec import add_executor_args, executor_from_args, executor_from_config

    parser = argparse.ArgumentParser()
    add_executor_args(parser)
    cfg = load_grid("demo", ["registry=/shared/reg", "exec.workers=1"])
    ex = executor_from_args(parser.parse_args(["--executor", "ray"]), cfg)
    assert isinstance(ex, RayExecutor) and ex.registry_root == "/shared/reg"
    assert isinstance(executor_from_args(parser.parse_args([]), cfg), LocalExecutor)  # the file says local, in process
    ray_cfg = load_grid("demo", ["exec.executor=ray", "exec.workers=1"])
    assert isinstance(executor_from_config(ray_cfg), RayExecutor)
    assert isinstance(executor_from_args(parser.parse_args(["--executor", "local"]), ray_cfg), LocalExecutor)


def _registry_honours_worker_env() -> bool:
    """Does ``Registry.open(root)`` open in worker mode (no SQLite) when MMGRID_REGISTRY_WORKER=1?"""
    import tempfile

    from mmgrid.registry.api import Registry

    old = os.environ.get(WORKER_ENV)
    os.environ[WORKER_ENV] = "1"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return not Registry.open(tmp).indexed
    finally:
        if old is None:
            os.environ.pop(WORKER_ENV)
        else:
            os.environ[WORKER_ENV] = old


def test_worker_writes_are_indexed_by_the_driver(ray_executor: RayExecutor, tmp_path: Path) -> None:
    from mmgrid import Registry

    if not _registry_honours_worker_env():
        pytest.skip(f"Registry.open does not honour {WORKER_ENV}=1 yet (registry concern: default index=None)")
    out = {}
    for name, ex in (("local", LocalExecutor()), ("ray", ray_executor)):
        root = tmp_path / name
        dag = Dag()
        for i, domain in enumerate(["A", "B", "C"]):
            dag.add(domain, Job(f"{T}:put_checkpoint", {"root": str(root), "domain": domain, "value": float(i)}))
        out[name] = run_dag(ex, dag, registry_root=root, progress=False)
        # The driver's sync indexed every worker write.
        table = Registry.open(root).query(paradigm="toy")
        assert sorted(table["domain"]) == ["A", "B", "C"]
        assert sorted(table["id"]) == sorted(r["id"] for r in out[name].values())
    assert {k: r["id"] for k, r in out["ray"].items()} == {k: r["id"] for k, r in out["local"].items()}
    assert all(r["indexed"] for r in out["local"].values())  # in the driver: the index is kept current
    ray_runs = out["ray"].values()
    assert not any(r["indexed"] or r["sqlite"] for r in ray_runs)  # workers never created index.sqlite


def test_build_and_temporal_sweep_on_ray_equal_local(
    ray_executor: RayExecutor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The real build (base -> pretrain -> p1 -> p2 per domain) and the temporal sweep, as
    Ray tasks, give the same checkpoint ids and the same evaluation numbers as locally."""
    from exec_tinygrid import tiny_grid

    from mmgrid.data.dataset import load_prepared
    from mmgrid.exec import sync_registry
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.temporal import run_temporal
    from mmgrid.train.build import build_grid

    out = {}
    for name, ex in (("local", LocalExecutor()), ("ray", ray_executor)):
        cfg = tiny_grid(tmp_path_factory, f"registry-{name}")
        res = build_grid(cfg, executor=ex, progress=False)
        sync_registry(cfg.registry)  # workers may not have indexed their checkpoints
        reg = Registry.open(cfg.registry)
        stored = set(reg.query(kind="trained")["id"])
        assert stored == {s.id for s in res.stages} and len(stored) == 2 * 3
        sweep = run_temporal(cfg, reg, load_prepared(cfg.prepared), executor=ex)
        out[name] = (res, sweep.sort_values(["domain", "group", "lambda", "metric"]).reset_index(drop=True))
    (res_l, sw_l), (res_r, sw_r) = out["local"], out["ray"]
    assert res_r.base_id == res_l.base_id and res_r.ids == res_l.ids
    assert len(sw_l) > 0 and sw_r.drop(columns="value").equals(sw_l.drop(columns="value"))
    assert sw_r["value"].tolist() == pytest.approx(sw_l["value"].tolist(), abs=1e-6)


def test_ray_refuses_jobs_larger_than_the_local_ray(ray_executor: RayExecutor) -> None:
    with pytest.raises(ConfigError, match="num_gpus_per_train"):
        ray_executor.submit(Job(f"{T}:add", {"a": 1, "b": 1}, resources={"num_gpus": 1}))
    with pytest.raises(ConfigError, match="num_cpus_per_job"):
        ray_executor.submit(Job(f"{T}:add", {"a": 1, "b": 1}, resources={"num_cpus": 64}))
    opts = RayExecutor._options(Job(f"{T}:add", resources={"num_cpus": 2, "num_gpus": 0.5}, name="stage"))
    assert opts == {"num_cpus": 2, "num_gpus": 0.5, "name": "stage"}
    half = ray_executor.submit(Job(f"{T}:add", {"a": 2, "b": 2}, resources={"num_cpus": 0.5}))
    assert half.result(timeout=60) == 4


GPU_SCRIPT = """
import json, ray
ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False)  # its own cluster (not the module's); a declared GPU needs no CUDA
from mmgrid.exec import Job
from mmgrid.exec.ray import RayExecutor
ex = RayExecutor()
gpu = [ex.submit(Job("os:getpid", resources={"num_gpus": 1})).result(timeout=120) for _ in range(2)]
print(json.dumps({"gpu": gpu}))
ray.shutdown()
"""


def test_gpu_tasks_run_in_a_fresh_process_each() -> None:
    """GPU memory (CUDA context included) goes back after every GPU task: its worker exits."""
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": _PATH, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run([sys.executable, "-c", GPU_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert pids["gpu"][0] != pids["gpu"][1]  # max_calls=1 (CPU workers, in contrast, may be reused)


CANCEL_SCRIPT = """
import json, sys, ray
from pathlib import Path
ray.init(address="local", num_cpus=2, include_dashboard=False)
from mmgrid.exec import Job
from mmgrid.exec.ray import RayExecutor
ex = RayExecutor(runtime_env={"env_vars": {"PYTHONPATH": sys.argv[2]}})
marker = sys.argv[1]
slow = ex.submit(Job("exec_toyjobs:write_after", {"marker": marker, "delay": 30.0}))
after = ex.submit(Job("exec_toyjobs:saw_marker", {"marker": marker}), [slow])
n = ex.cancel()
failed = [f.exception(timeout=60) is not None for f in (slow, after)]
print(json.dumps({"cancelled": n, "failed": failed, "marker": Path(marker).exists()}))
ray.shutdown()
"""


def test_cancel_stops_pending_jobs(tmp_path: Path) -> None:
    """Cancelling (Ctrl-C) stops a running job and the job waiting on it; nothing is written.

    Runs in its own process and Ray: cancelling tasks in the module's shared Ray, after other
    test modules had used it, could take the pytest process down with it.
    """
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": _PATH, "RAY_USAGE_STATS_ENABLED": "0"}
    marker = str(tmp_path / "slow.done")
    proc = subprocess.run([sys.executable, "-c", CANCEL_SCRIPT, marker, _PATH], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cancelled"] >= 2
    assert out["failed"] == [True, True]
    assert out["marker"] is False
