"""ProcessExecutor (``exec.workers``): the executor contract on a pool of local processes.

Ordering by deps and dependency results, a diamond, failure propagation, jobs running side
by side (checked with the timestamps the jobs record), worker mode, cancel, a killed worker,
the config/flag range checks, and a real build equal to the in-process one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from concurrent.futures import CancelledError, Future
from pathlib import Path

import pytest

from mmgrid.config import ExecConfig
from mmgrid.errors import ConfigError
from mmgrid.exec import (
    Job,
    LocalExecutor,
    ProcessExecutor,
    WorkerDiedError,
    add_executor_args,
    executor_from_args,
    executor_from_config,
    get_executor,
)
from mmgrid.exec.pool import default_workers

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the toy jobs are imported by dotted path (workers get this sys.path)
    sys.path.insert(0, str(HERE))
from test_exec_base import toy_dag_failures  # noqa: E402

T = "exec_toyjobs"
WAIT = 120  # seconds: a generous bound on a busy 2-core machine; a hang fails instead of blocking the suite


@pytest.fixture(scope="module")
def pool() -> ProcessExecutor:
    """Two worker processes, shared by the tests that do not break or cancel anything."""
    with ProcessExecutor(2) as ex:
        yield ex


def _stamps(futures: list) -> list[dict]:
    return [f.result(timeout=WAIT) for f in futures]


def _until_running(fut: Future) -> None:
    """Wait until the job has been handed to a worker."""
    deadline = time.monotonic() + WAIT
    while not fut.running():
        assert not fut.done() and time.monotonic() < deadline
        time.sleep(0.01)


def test_dep_results_reach_the_job_in_order(pool: ProcessExecutor) -> None:
    a = pool.submit(Job(f"{T}:add", {"a": 2, "b": 3}))
    b = pool.submit(Job(f"{T}:add", {"a": 4, "b": 5}))
    # total(deps=[5, 9], extra=1) = 15; without deps_as the deps only order the job
    assert pool.submit(Job(f"{T}:total", {"extra": 1}, deps_as="deps"), [a, b]).result(timeout=WAIT) == 15
    assert pool.submit(Job(f"{T}:add", {"a": 1, "b": 1}), [a, b]).result(timeout=WAIT) == 2


def test_a_dependent_starts_after_its_dependency(pool: ProcessExecutor, tmp_path: Path) -> None:
    marker = str(tmp_path / "first.done")
    first = pool.submit(Job(f"{T}:write_after", {"marker": marker, "delay": 1.0}))
    # The second worker is free: without the dependency the check would run at once and see nothing.
    second = pool.submit(Job(f"{T}:saw_marker", {"marker": marker}), [first])
    assert second.result(timeout=WAIT) is True


def test_diamond(pool: ProcessExecutor) -> None:
    """a -> (b, c) -> d: d sees b's and c's results, in its dependency order."""
    a = pool.submit(Job(f"{T}:add", {"a": 1, "b": 2}))  # 3
    b = pool.submit(Job(f"{T}:total", {"extra": 10}, deps_as="deps"), [a])  # 13
    c = pool.submit(Job(f"{T}:total", {"extra": 100}, deps_as="deps"), [a])  # 103
    d = pool.submit(Job(f"{T}:total", {"extra": 1000}, deps_as="deps"), [c, b])  # 1116
    assert [f.result(timeout=WAIT) for f in (a, b, c, d)] == [3, 13, 103, 1116]


def test_run_dag_equals_local_and_failures_do_not_run_dependents(pool: ProcessExecutor, tmp_path: Path) -> None:
    outcomes = toy_dag_failures((LocalExecutor(), pool), tmp_path)
    local, pooled = outcomes
    assert pooled.results == local.results == {"a": 3, "b": 30, "c": 133, "d": 0}
    assert set(pooled.errors) == {"e", "f"}
    assert all(isinstance(e, ValueError) and "planned failure" in str(e) for e in pooled.errors.values())
    # a dependent of a failed job never runs (its marker is never written); an independent job does
    marker = tmp_path / "must-not-run"
    bad = pool.submit(Job(f"{T}:boom", {"message": "x"}))
    after = pool.submit(Job(f"{T}:write_after", {"marker": str(marker), "delay": 0.0}), [bad])
    other = pool.submit(Job(f"{T}:add", {"a": 1, "b": 1}))
    assert isinstance(after.exception(timeout=WAIT), ValueError) and str(after.exception()) == "x"
    assert other.result(timeout=WAIT) == 2 and not marker.exists()


def test_independent_jobs_overlap_in_time(pool: ProcessExecutor) -> None:
    _stamps([pool.submit(Job(f"{T}:stamp", {"delay": 0.2})) for _ in range(2)])  # both workers are up
    runs = _stamps([pool.submit(Job(f"{T}:stamp", {"delay": 2.0})) for _ in range(2)])
    assert max(r["start"] for r in runs) < min(r["end"] for r in runs)  # both ran at the same time
    assert runs[0]["pid"] != runs[1]["pid"] and os.getpid() not in {r["pid"] for r in runs}


def test_ready_jobs_go_first_in_submission_order() -> None:
    """One worker: while x runs, y (after x) waits and z is ready; when x ends, y (submitted first)
    goes before z. With two workers an independent chain does not wait for another."""
    with ProcessExecutor(1) as one:
        x = one.submit(Job(f"{T}:stamp", {"delay": 0.5}))
        y = one.submit(Job(f"{T}:stamp", {"delay": 0.0}), [x])
        z = one.submit(Job(f"{T}:stamp", {"delay": 0.0}))
        rx, ry, rz = _stamps([x, y, z])
        assert rx["end"] <= ry["start"] <= rz["start"]
    with ProcessExecutor(2) as two:
        _stamps([two.submit(Job(f"{T}:stamp", {"delay": 0.2})) for _ in range(2)])  # both workers are up
        x = two.submit(Job(f"{T}:stamp", {"delay": 2.0}))
        y = two.submit(Job(f"{T}:stamp", {"delay": 0.0}), [x])
        z = two.submit(Job(f"{T}:stamp", {"delay": 0.0}))
        rx, ry, rz = _stamps([x, y, z])
        assert rz["end"] < rx["end"] <= ry["start"]  # z did not wait for x's chain


def test_results_and_kwargs_must_be_json(pool: ProcessExecutor) -> None:
    with pytest.raises(ConfigError, match="JSON-able"):
        pool.submit(Job(f"{T}:add", {"a": object(), "b": 1}))
    with pytest.raises(ConfigError, match="not JSON-able"):
        pool.submit(Job(f"{T}:not_json")).result(timeout=WAIT)


def test_jobs_run_in_worker_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # set by the user: kept
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)  # unset: 1 in the workers
    monkeypatch.delenv("MMGRID_PROGRESS", raising=False)
    monkeypatch.setenv("MMGRID_QUIET", "1")
    with ProcessExecutor(2) as ex:
        env = ex.submit(Job(f"{T}:worker_env")).result(timeout=WAIT)
    assert env["MMGRID_REGISTRY_WORKER"] == "1" and env["cwd"] == os.getcwd() and env["pid"] != os.getpid()
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("3", "1")
    assert (env["MMGRID_PROGRESS"], env["MMGRID_QUIET"]) == ("lines", "1")
    assert os.environ.get("MMGRID_REGISTRY_WORKER") is None  # the driver itself is never in worker mode


def test_cancel_drops_what_has_not_started(tmp_path: Path) -> None:
    with ProcessExecutor(1) as ex:
        running = ex.submit(Job(f"{T}:stamp", {"delay": 1.5}))
        queued = ex.submit(Job(f"{T}:stamp", {"delay": 0.0, "marker": str(tmp_path / "queued")}))
        after = ex.submit(Job(f"{T}:stamp", {"delay": 0.0, "marker": str(tmp_path / "after")}), [running])
        _until_running(running)
        assert ex.cancel() == 2
        assert running.result(timeout=WAIT)["end"] > 0  # a running job finishes
        assert queued.cancelled() and after.cancelled()
        with pytest.raises(CancelledError):
            after.result()
    assert not (tmp_path / "queued").exists() and not (tmp_path / "after").exists()


def test_shutdown_cancels_the_rest_and_refuses_new_jobs(tmp_path: Path) -> None:
    ex = ProcessExecutor(1)
    first = ex.submit(Job(f"{T}:stamp", {"delay": 0.5}))
    later = ex.submit(Job(f"{T}:stamp", {"delay": 0.0, "marker": str(tmp_path / "later")}), [first])
    _until_running(first)
    ex.shutdown()
    assert first.done() and first.exception() is None and later.cancelled()
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(Job(f"{T}:add", {"a": 1, "b": 1}))


def test_a_killed_worker_fails_its_job_with_a_named_error() -> None:
    with ProcessExecutor(2) as ex:
        dead = ex.submit(Job(f"{T}:die", name="emb/Books/p1"))
        after = ex.submit(Job(f"{T}:add", {"a": 1, "b": 1}), [dead])
        err = dead.exception(timeout=WAIT)
        assert isinstance(err, WorkerDiedError)
        assert "emb/Books/p1" in str(err) and "rerun" in str(err) and "kept in the registry" in str(err)
        assert after.exception(timeout=WAIT) is err  # its dependent did not run
        # the pool is started afresh for the jobs that come next
        assert ex.submit(Job(f"{T}:add", {"a": 2, "b": 2})).result(timeout=WAIT) == 4


def test_workers_setting_and_flag() -> None:
    from mmgrid.config import load_grid

    assert ExecConfig().workers == 1
    with pytest.raises(ConfigError, match="exec.workers"):
        load_grid("demo", ["exec.workers=-1"])
    with pytest.raises(ConfigError):
        ProcessExecutor(0)
    assert isinstance(get_executor("local", workers=1), LocalExecutor)
    ex = get_executor("local", workers=3, registry_root="runs/x/registry")
    assert isinstance(ex, ProcessExecutor) and (ex.workers, ex.registry_root) == (3, "runs/x/registry")
    every = get_executor("local", workers=0)
    n = len(os.sched_getaffinity(0))
    assert default_workers() == n and (every.workers == n if n > 1 else isinstance(every, LocalExecutor))

    parser = argparse.ArgumentParser()
    add_executor_args(parser)
    cfg = load_grid("demo", ["registry=/shared/reg", "exec.workers=2"])
    from_file = executor_from_config(cfg)
    assert isinstance(from_file, ProcessExecutor) and from_file.workers == 2 and from_file.registry_root == "/shared/reg"
    assert isinstance(executor_from_args(parser.parse_args(["--workers", "1"]), cfg), LocalExecutor)  # the flag wins
    assert executor_from_args(parser.parse_args(["--workers", "4"]), cfg).workers == 4
    with pytest.raises(ConfigError, match="--workers -1"):
        executor_from_args(parser.parse_args(["--workers", "-1"]), cfg)


@pytest.mark.slow
def test_build_with_two_workers_equals_in_process(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real tiny build with exec.workers=2 gives the same checkpoint ids and bit-identical
    tensors (the blobs' sha256 in the manifests) as in this process, all in the index after."""
    from exec_tinygrid import tiny_grid

    from mmgrid.registry.api import Registry
    import mmgrid.train.build as build_mod
    from mmgrid.train.build import build_grid

    made = []

    def recording(cfg):  # build_grid's default executor, recorded
        made.append(executor_from_config(cfg))
        return made[-1]

    monkeypatch.setattr(build_mod, "executor_from_config", recording)
    out = {}
    for workers in (1, 2):
        cfg = tiny_grid(tmp_path_factory, f"registry-w{workers}")
        cfg = dataclasses.replace(cfg, exec=dataclasses.replace(cfg.exec, workers=workers))
        res = build_grid(cfg, progress=False)  # the default executor comes from cfg.exec
        reg = Registry.open(cfg.registry)
        indexed = set(reg.query(kind="trained")["id"])
        assert indexed == {s.id for s in res.stages} and len(indexed) == 2 * 3  # synced by build_grid
        blobs = {cid: {k: b.sha256 for k, b in reg.get(cid).blobs.items()} for cid in sorted(indexed)}
        out[workers] = (res, blobs)
        reg.close()
    assert [type(e) for e in made] == [LocalExecutor, ProcessExecutor] and made[1].workers == 2
    (r1, b1), (r2, b2) = out[1], out[2]
    assert r2.base_id == r1.base_id and r2.ids == r1.ids
    assert b2 == b1 and all(b1.values())


def test_progress_lines_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """MMGRID_PROGRESS=lines (set in pool workers) gives plain lines even on a terminal."""
    import io

    from mmgrid.runtime import progress as P

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    P.set_quiet(False)
    try:
        monkeypatch.delenv("MMGRID_PROGRESS", raising=False)
        assert not isinstance(P.progress(total=4, file=Terminal()), P.PlainProgress)  # a tqdm bar
        monkeypatch.setenv("MMGRID_PROGRESS", "lines")
        out = Terminal()
        bar = P.progress(total=4, desc="emb/Books/p1", unit="step", file=out, min_interval=0.0)
        assert isinstance(bar, P.PlainProgress)
        for _ in range(4):
            bar.update(1)
        lines = out.getvalue().splitlines()
        assert [line.split("%")[0].split()[-1] for line in lines] == ["25", "50", "75", "100"]
        assert all(line.startswith("emb/Books/p1:") for line in lines)
    finally:
        P.set_quiet(None)


def test_named_errors_reach_the_driver_intact(pool: ProcessExecutor) -> None:
    """An error whose __init__ takes more than a message (UnknownNameError(kind, name, known))
    arrives as itself, and does not break the pool (other jobs are unaffected)."""
    from mmgrid.errors import UnknownNameError

    slow = pool.submit(Job(f"{T}:stamp", {"delay": 1.0}))
    err = pool.submit(Job(f"{T}:unknown_name", {"name": "emd"})).exception(timeout=WAIT)
    assert type(err) is UnknownNameError and (err.kind, err.name, err.known) == ("paradigm", "emd", ("emb", "semid", "text"))
    assert str(err) == str(UnknownNameError("paradigm", "emd", ["emb", "semid", "text"]))  # as raised here
    assert slow.result(timeout=WAIT)["end"] > 0


def test_validate_warns_where_workers_do_not_apply() -> None:
    from mmgrid.config import load_grid
    from mmgrid.exec.validate import check_scale

    def warned(*overrides: str) -> list[str]:
        return [w for w in check_scale(load_grid("demo", list(overrides))) if "exec.workers" in w]

    assert warned("exec.workers=4") == []  # local, cpu: what it is for
    assert any("local executor only" in w for w in warned("exec.workers=4", "exec.executor=ray"))
    assert any("share the GPU" in w for w in warned("exec.workers=2", "train.device=cuda"))


DRIVER = """
import sys, time
sys.path.insert(0, {here!r})
from mmgrid.exec import Job, ProcessExecutor
if __name__ == "__main__":
    ex = ProcessExecutor(1)
    ex.submit(Job("exec_toyjobs:pid_then_sleep", {{"marker": {marker!r}, "delay": 300.0}}))
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")  # a zombie has ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's prctl")
def test_killing_the_driver_kills_its_workers(tmp_path: Path) -> None:
    """A driver killed with SIGKILL (no cleanup runs) takes its running workers with it: no orphan
    goes on computing a job nobody will read (it would hold a CPU until the job ends)."""
    import signal
    import subprocess

    marker = tmp_path / "worker.pid"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(here=str(HERE), marker=str(marker)))
    repo = str(HERE.parent.parent)  # this checkout's mmgrid, not only the installed one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    driver = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + WAIT
        while not (marker.exists() and marker.read_text()):
            assert driver.poll() is None and time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        worker = int(marker.read_text())
        assert _alive(worker)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=WAIT)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), f"worker {worker} outlived its killed driver"
    finally:
        if driver.poll() is None:
            driver.kill()
