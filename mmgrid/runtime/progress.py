"""Progress with rate and ETA for every long step (training stages, evaluations, sweeps, a build).

One helper, :func:`progress`, used everywhere: it returns a bar with ``update``,
``set_postfix``, ``write`` and ``close`` (and iterates when given an iterable).

* stderr is a terminal: a tqdm bar (rate, elapsed, time left).
* stderr is not a terminal (a log file, CI, a Ray worker): a few plain lines per step, at
  25 / 50 / 75 % (each at least ``min_interval`` seconds after the previous line) and one
  at the end, each with the count, the rate, the elapsed time and the ETA
  (``elapsed * (total - done) / done``); nothing is printed between them.
* ``MMGRID_PROGRESS=lines``: the plain lines even on a terminal. The local process pool
  (:class:`mmgrid.exec.pool.ProcessExecutor`) sets it in its workers, whose jobs share the
  driver's terminal: the driver's overall bar plus a few lines per job, no bars drawn over
  each other. Unset (or any other value): chosen by the terminal as above.
* quiet: nothing at all. Quiet is on under ``mmgrid --quiet`` (which sets ``MMGRID_QUIET=1``,
  so executor workers inherit it), when ``MMGRID_QUIET`` is set to a true value, and in tests
  (pytest sets ``PYTEST_CURRENT_TEST``); :func:`set_quiet` overrides all three.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable, Iterator, TextIO

from tqdm.auto import tqdm

MILESTONES = (0.25, 0.5, 0.75)
_OVERRIDE: bool | None = None


def set_quiet(quiet: bool | None) -> None:
    """Force quiet on (True) or off (False); None goes back to the environment's choice."""
    global _OVERRIDE
    _OVERRIDE = quiet


def plain_lines() -> bool:
    """Whether ``MMGRID_PROGRESS=lines`` asks for plain lines even on a terminal."""
    return os.environ.get("MMGRID_PROGRESS", "").strip().lower() == "lines"


def is_quiet() -> bool:
    """Whether progress output is suppressed (see the module docstring)."""
    if _OVERRIDE is not None:
        return _OVERRIDE
    if os.environ.get("MMGRID_QUIET", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    return "PYTEST_CURRENT_TEST" in os.environ


def _fmt_seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


class _Silent:
    """A bar that prints nothing."""

    def __init__(self, iterable: Iterable[Any] | None = None) -> None:
        self._it = iterable
        self.n = 0

    def __iter__(self) -> Iterator[Any]:
        for x in self._it or ():
            yield x
            self.n += 1

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        return None

    def write(self, msg: str) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PlainProgress(_Silent):
    """Plain progress lines for a log file: milestones and the end, with rate and ETA."""

    def __init__(self, iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", min_interval: float = 2.0, file: TextIO | None = None) -> None:
        super().__init__(iterable)
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.unit, self.min_interval = total, desc, unit, min_interval
        self.file = file
        self.t0 = self._last = time.perf_counter()
        self._next = 0  # index into MILESTONES
        self._postfix = ""
        self._closed = False

    def __iter__(self) -> Iterator[Any]:
        for x in self._it or ():
            yield x
            self.update(1)
        self.close()

    def _out(self) -> TextIO:
        return self.file or sys.stderr

    def line(self) -> str:
        el = time.perf_counter() - self.t0
        rate = self.n / el if el > 0 else 0.0
        head = f"{self.desc}: " if self.desc else ""
        if self.total:
            pct = 100.0 * self.n / self.total
            eta = el * (self.total - self.n) / self.n if self.n else float("nan")
            text = (f"{head}{pct:3.0f}% {self.n}/{self.total} {self.unit}, {rate:.2f} {self.unit}/s, "
                    f"elapsed {_fmt_seconds(el)}, ETA {_fmt_seconds(eta) if eta == eta else '?'}")
        else:
            text = f"{head}{self.n} {self.unit}, {rate:.2f} {self.unit}/s, elapsed {_fmt_seconds(el)}"
        return text + (f" [{self._postfix}]" if self._postfix else "")

    def _print(self) -> None:
        print(self.line(), file=self._out(), flush=True)
        self._last = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.total or self._closed:
            return
        hit = False
        while self._next < len(MILESTONES) and self.n >= MILESTONES[self._next] * self.total:
            self._next += 1
            hit = True
        if hit and self.n < self.total and time.perf_counter() - self._last >= self.min_interval:
            self._print()
        if self.n >= self.total:
            self.close()

    def set_postfix(self, *args: Any, refresh: bool = False, **kwargs: Any) -> None:
        self._postfix = ", ".join(f"{k}={v}" for k, v in kwargs.items())

    def write(self, msg: str) -> None:
        print(msg, file=self._out(), flush=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.n > 0 or not self.total:
            self._print()


def progress(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             enabled: bool = True, leave: bool = False, min_interval: float = 2.0, file: TextIO | None = None) -> Any:
    """A progress bar for ``iterable`` (or ``total`` manual ``update`` steps).

    Args:
        iterable: iterate through the bar (or None and call ``update``).
        total: number of steps (default ``len(iterable)``).
        desc: what runs, e.g. ``text/Books/p1``.
        unit: the step's name (``step``, ``model``, ``stage``...).
        enabled: False = silent (a caller's ``progress=False``).
        leave: keep the terminal bar after it ends.
        min_interval: plain mode: seconds between milestone lines (the last line is always printed).
        file: where to write (default stderr; its being a terminal chooses tqdm or plain lines).
    """
    if not enabled or is_quiet():
        return _Silent(iterable)
    out = file or sys.stderr
    if getattr(out, "isatty", lambda: False)() and not plain_lines():
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, file=out, dynamic_ncols=True)
    return PlainProgress(iterable, total=total, desc=desc, unit=unit, min_interval=min_interval, file=file)


def note(msg: str, enabled: bool = True) -> None:
    """A one-line message that keeps terminal bars intact (tqdm.write); silent when quiet."""
    if not enabled or is_quiet():
        return
    if sys.stderr.isatty() and not plain_lines():
        tqdm.write(msg, file=sys.stderr)
    else:
        print(msg, file=sys.stderr, flush=True)
