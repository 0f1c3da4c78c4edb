"""Run jobs in a pool of local worker processes (``exec.workers: N`` / ``--workers N``).

:class:`ProcessExecutor` keeps the contract of every executor (:mod:`mmgrid.exec.base`):
``submit(job, deps)`` returns a ``concurrent.futures.Future``; a job starts only after its
dependencies are done; a failed dependency fails the job without running it, with the
dependency's exception; ``Job(..., deps_as=...)`` passes the dependencies' results.

Jobs run exactly as Ray tasks do (:func:`mmgrid.exec.job.run_in_worker`): the job travels
as JSON, runs in worker mode (``MMGRID_REGISTRY_WORKER=1``: ``Registry.open`` writes blobs,
manifests and results files, never the SQLite index) in the driver's working folder, and
its result must be JSON-able. The driver indexes what the workers wrote (``reg.sync()``,
done by :func:`mmgrid.exec.dag.run_dag` and ``build_grid``).

Scheduling: one dispatcher thread owns the queue. A job is handed to the pool when all its
dependencies are done and a worker is free, so independent chains (pretrain -> p1 -> p2 of
different cells) run side by side; among ready jobs the one submitted first goes first.
At most ``workers`` jobs are in the pool at any time, so a job that has not been handed
over is "not started" and :meth:`ProcessExecutor.cancel` can drop it. Result futures are
completed on the dispatcher thread (never on the pool's internal thread), so their
done-callbacks run there, one at a time.

Worker processes are started with ``spawn`` (the driver has torch's threads loaded, which a
``fork`` would copy in an undefined state). Each worker sets ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` to 1 unless they are set (a job still sets torch's threads itself,
``train.threads``), prints plain progress lines instead of bars (``MMGRID_PROGRESS=lines``,
so that several jobs do not draw over each other and the driver's bar), and inherits
``MMGRID_QUIET`` and the driver's ``sys.path``.

Workers import the driver's ``__main__`` (``spawn``): a Python script that starts jobs on
this executor keeps its top level under ``if __name__ == "__main__":`` (the ``mmgrid``
command does). Plugins (:mod:`mmgrid.plugins`): a worker reads the installed distributions'
entry points itself on its first lookup of a name it does not hold, so it finds the same merge
methods, paradigms and studies as the driver; a name registered from Python is there when its
module's top level runs in the worker too (the driver script's, imported as above).

Pickle: ``multiprocessing`` pickles what travels between the driver and its own worker processes
(the JSON job text, the JSON-able result, an exception). Nothing pickled is ever read from or
written to disk; checkpoints still go through the registry as safetensors.

A worker process ends with its driver: killing the driver (even with SIGKILL) kills the workers
on Linux, so no job goes on running for a driver that is gone (:func:`_die_with_driver`).

A worker process that dies (killed, out of memory, a crash in native code) breaks the pool:
the jobs running in it at that moment fail with :class:`WorkerDiedError`, a fresh pool runs
the jobs still waiting, and nothing hangs.
"""

from __future__ import annotations

import copyreg
import multiprocessing
import os
import pickle
import queue
import sys
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Sequence

from mmgrid.errors import ConfigError, MmgridError
from mmgrid.exec.job import Job, job_to_json, run_in_worker

__all__ = ["ProcessExecutor", "WorkerDiedError", "default_workers"]

PROGRESS_ENV = "MMGRID_PROGRESS"  # "lines": plain progress lines even on a terminal (mmgrid.runtime.progress)
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_STOP = object()


class WorkerDiedError(MmgridError, RuntimeError):
    """A worker process of a :class:`ProcessExecutor` died while it ran this job."""


def default_workers() -> int:
    """The CPUs this process may use (``exec.workers: 0``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_driver(driver_pid: int) -> None:
    """Make this worker end when the driver process does, however the driver ends.

    A driver killed by a signal (SIGKILL, or SIGTERM without Python's cleanup) cannot shut its
    pool down, and its workers would otherwise run their job to the end and then wait on a
    dead pipe, at full CPU for a long job. On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has
    the kernel kill the worker when its parent exits; if the driver is already gone by then
    (the parent pid no longer matches), the worker exits at once. Elsewhere this does nothing:
    the pool's own broken-pipe handling remains.
    """
    if not sys.platform.startswith("linux"):
        return
    # lazy: only the Linux worker start-up needs them
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
        return
    if os.getppid() != driver_pid:
        os._exit(1)


def _init_worker(env: dict[str, str], driver_pid: int | None = None) -> None:
    """Set up one worker process before its first job (see the module docstring)."""
    if driver_pid is not None:
        _die_with_driver(driver_pid)
    unset = [k for k in _THREAD_ENV if k not in os.environ]
    for k in unset:
        os.environ[k] = "1"
    os.environ.update(env)
    torch = sys.modules.get("torch")  # imported already (by the driver's __main__ script): env came too late
    if torch is not None and "OMP_NUM_THREADS" in unset:
        torch.set_num_threads(1)


def _rebuild_exception(cls: type[BaseException], args: tuple, state: dict[str, Any]) -> BaseException:
    """An exception of ``cls`` with ``args`` and attributes ``state``, without calling its ``__init__``."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def _reduce_exception(exc: BaseException) -> tuple:
    return _rebuild_exception, (type(exc), exc.args, dict(exc.__dict__))


def _run_pooled(job_json: str, cwd: str, *dep_results: Any) -> Any:
    """Body of every pool job: :func:`run_in_worker`, with its error made to reach the driver.

    An exception whose ``__init__`` takes other arguments than its message (most of
    mmgrid's named errors) does not unpickle in the driver, and the pool would take that
    for a dead worker; such a type is pickled by its args and attributes instead.
    """
    try:
        return run_in_worker(job_json, cwd, *dep_results)
    except BaseException as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001 - any failure to round-trip: pickle it field by field
            copyreg.pickle(type(exc), _reduce_exception)
        raise


@dataclass(eq=False)
class _Entry:
    job: Job
    job_json: str
    deps: tuple[Future, ...]
    future: Future
    cwd: str


class ProcessExecutor:
    """Run jobs in ``workers`` local processes; futures are ``concurrent.futures.Future``.

    Args:
        workers: worker processes (at least 1). Memory grows with it: every worker loads
            its own copy of what its jobs need (the prepared data, a model).
        registry_root: the registry the jobs write to; the driver syncs its index after the
            jobs finish (:func:`mmgrid.exec.dag.run_dag`).

    Jobs' ``resources`` are not scheduled here: every job takes one worker process.
    Use it as a context manager, or call :meth:`shutdown`.
    """

    def __init__(self, workers: int, registry_root: str | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"ProcessExecutor: workers={workers!r}; use a whole number of processes, 1 or more "
                              "(exec.workers: 0 means one per CPU and is resolved before this).")
        self.workers = workers
        self.registry_root = registry_root
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting: list[_Entry] = []  # submission order; touched under _lock
        self._running: dict[Future, _Entry] = {}  # pool future -> job; dispatcher thread only
        self._pool: ProcessPoolExecutor | None = None
        self._pool_broken = False  # a worker of self._pool died: the next job gets a fresh pool
        self._thread: threading.Thread | None = None
        self._closed = False
        # MMGRID_QUIET (set by `mmgrid --quiet`) comes with the environment; a set_quiet() call does not
        self._worker_env = {PROGRESS_ENV: os.environ.get(PROGRESS_ENV, "lines")}
        if "MMGRID_QUIET" in os.environ:
            self._worker_env["MMGRID_QUIET"] = os.environ["MMGRID_QUIET"]

    # ---- the driver's side -------------------------------------------------------------

    def submit(self, job: Job, deps: Sequence[Future] = ()) -> Future:
        """Submit ``job`` to run after ``deps``; returns a future of its result.

        Raises:
            ConfigError: the job's kwargs are not JSON-able (nothing is submitted).
            RuntimeError: the executor was shut down.
        """
        job_json = job_to_json(job)  # fails here, in the driver, like on Ray
        fut: Future = Future()
        entry = _Entry(job, job_json, tuple(deps), fut, os.getcwd())
        with self._lock:
            if self._closed:
                raise RuntimeError("ProcessExecutor: submit after shutdown; make a new executor.")
            self._waiting.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mmgrid-dispatch", daemon=True)
                self._thread.start()
        for d in entry.deps:
            d.add_done_callback(self._wake)  # any thread; only puts a token in the queue
        self._wake()
        return fut

    def cancel(self) -> int:
        """Cancel every job not handed to a worker yet (e.g. on Ctrl-C); returns how many.

        Running jobs go on (a Ctrl-C on a terminal reaches the workers too). Jobs waiting on
        a cancelled job are cancelled as well.
        """
        with self._lock:
            waiting = list(self._waiting)
        n = sum(1 for e in waiting if e.future.cancel())
        self._wake()
        return n

    def shutdown(self) -> None:
        """Cancel the jobs that have not started, wait for the running ones, stop the pool.

        Wait for the futures you need before (``run_dag`` and ``build_grid`` do).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self.cancel()
        self._events.put(_STOP)
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> "ProcessExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _wake(self, _fut: Future | None = None) -> None:
        self._events.put(None)

    # ---- the dispatcher thread ---------------------------------------------------------

    def _loop(self) -> None:
        stop = False
        while True:
            items = [self._events.get()]
            while True:  # handle everything queued, then dispatch once
                try:
                    items.append(self._events.get_nowait())
                except queue.Empty:
                    break
            try:
                for item in items:
                    if item is _STOP:
                        stop = True
                    elif item is not None:
                        self._finish(*item)
                self._dispatch()
            except BaseException as exc:  # noqa: BLE001 - a fault here must fail the waiting jobs, not hang them
                with self._lock:
                    waiting, self._waiting = self._waiting, []
                for e in waiting:
                    if e.future.set_running_or_notify_cancel():
                        e.future.set_exception(exc)
            if stop:
                with self._lock:
                    idle = not self._waiting
                if idle and not self._running:
                    return

    def _finish(self, pool_future: Future, entry: _Entry, pool: ProcessPoolExecutor) -> None:
        """Hand a pool future's outcome to the job's future (callbacks run on this thread)."""
        del self._running[pool_future]
        exc = pool_future.exception()
        if isinstance(exc, BrokenProcessPool):
            if pool is self._pool:
                self._pool_broken = True
            err = WorkerDiedError(
                f"job {entry.job.label!r}: a worker process of the local pool died while the job ran (killed, out "
                "of memory, or a crash in native code; every job running at that moment fails with it). Finished "
                "checkpoints are kept in the registry; rerun the same command to resume (finished jobs are cached), "
                "with fewer exec.workers / --workers if memory ran out. (A script that starts jobs must keep its "
                "top level under `if __name__ == \"__main__\":`; the spawned workers import it.)"
            )
            err.__cause__ = exc
            entry.future.set_exception(err)
        elif exc is not None:
            entry.future.set_exception(exc)
        else:
            entry.future.set_result(pool_future.result())

    def _dispatch(self) -> None:
        """Start ready jobs in submission order while workers are free; fail or cancel the doomed."""
        with self._lock:
            waiting = list(self._waiting)
        for e in waiting:
            if e.future.cancelled():
                self._drop(e)
                continue
            if not all(d.done() for d in e.deps):
                continue
            cancelled = next((d for d in e.deps if d.cancelled()), None)
            failed = next((d for d in e.deps if not d.cancelled() and d.exception() is not None), None)
            if cancelled is not None or failed is not None:
                self._drop(e)
                if failed is not None:
                    e.future.set_exception(failed.exception())
                else:
                    e.future.cancel()
                continue
            if len(self._running) >= self.workers:
                continue  # keep looking: failures downstream are still propagated
            self._drop(e)
            if not e.future.set_running_or_notify_cancel():
                continue  # cancelled just now
            self._start(e)

    def _start(self, e: _Entry) -> None:
        args = (_run_pooled, e.job_json, e.cwd, *[d.result() for d in e.deps])
        try:
            try:
                pool = self._ensure_pool()
                pf = pool.submit(*args)
            except BrokenProcessPool:  # a worker died since the last job finished: start afresh
                self._pool_broken = True
                pool = self._ensure_pool()
                pf = pool.submit(*args)
        except Exception as exc:  # noqa: BLE001 - e.g. no process can be started: the job fails, nothing hangs
            e.future.set_exception(exc)
            return
        self._running[pf] = e
        pf.add_done_callback(lambda f: self._events.put((f, e, pool)))  # runs on the pool's thread: queue only

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is not None and self._pool_broken:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool, self._pool_broken = None, False
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self._worker_env, os.getpid()),
            )
        return self._pool

    def _drop(self, e: _Entry) -> None:
        with self._lock:
            self._waiting.remove(e)
