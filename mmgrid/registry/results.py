"""Evaluation results as append-only JSONL files, one file per writer.

Each :meth:`ResultsLog.append` writes one complete line with a single ``write`` on an
``O_APPEND`` descriptor (then fsync): a killed writer leaves at most a torn last line,
which readers skip, and no two processes ever share a file. These files are the source
of truth; the SQLite ``results`` table is rebuilt from them.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping

from mmgrid.registry.contain import outside
from mmgrid.registry.errors import RegistryError
from mmgrid.registry.names import canonical_json, hash_json, now_iso


def make_record(
    cid: str | None,
    split: str,
    group: str,
    metrics: Mapping[str, float],
    recipe: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    ci: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One evaluation as a JSON-able record (one line of a results file).

    ``ci`` (optional): ``{metric: [low, high]}``, the interval of each metric's value (metrics
    without one get NaN bounds in ``Registry.results()``)."""
    if cid is None and recipe is None:
        raise RegistryError("record_eval needs a checkpoint id or, for a merge that was never stored, recipe={...}.")
    if not metrics:
        raise RegistryError("record_eval got no metrics; pass metrics={'recall@10': 0.12, ...}.")
    clean: dict[str, float] = {}
    for name, value in metrics.items():
        try:
            clean[str(name)] = float(value)
        except (TypeError, ValueError):
            raise RegistryError(f"metric {name!r}={value!r} is not a number; record plain floats.") from None
    ci_clean: dict[str, list[float]] = {}
    for name, bounds in (ci or {}).items():
        try:
            lo, hi = (float(b) for b in bounds)
        except (TypeError, ValueError):
            raise RegistryError(f"ci[{name!r}]={bounds!r} is not a pair of numbers [low, high].") from None
        if str(name) not in clean:
            raise RegistryError(f"ci names metric {name!r}, which is not among the recorded metrics {sorted(clean)}.")
        if not lo <= hi:
            raise RegistryError(f"ci[{name!r}]: low {lo} is above high {hi}.")
        ci_clean[str(name)] = [lo, hi]
    try:
        recipe_json = canonical_json(dict(recipe)) if recipe is not None else None
        extra_d = json.loads(canonical_json(dict(extra or {})))
    except (TypeError, ValueError) as exc:
        raise RegistryError(f"recipe and extra must be JSON-able: {exc}") from exc
    rec = {
        "key": uuid.uuid4().hex,
        "id": cid,
        "recipe_hash": hash_json(dict(recipe)) if recipe is not None else None,
        "recipe": recipe_json,
        "split": str(split),
        "group": str(group),
        "metrics": clean,
        "extra": extra_d,
        "created": now_iso(),
    }
    if ci_clean:
        rec["ci"] = ci_clean
    return rec


class ResultsLog:
    """This process's results file, created on the first append."""

    def __init__(self, root: Path, durable: bool = True) -> None:
        self.dir = Path(root) / "results"
        self.durable = durable
        self._fd: int | None = None
        self._pid = -1
        self.path: Path | None = None

    def append(self, *records: Mapping[str, Any]) -> int:
        """Append records (one line each) with one ``write``; returns the offset they start at.

        All or nothing: a failed or short write (a full disk), or a failed fsync, cuts the file
        back to where it was (a file this call created is removed) and raises ``OSError``.
        """
        data = b"".join((canonical_json(r) + "\n").encode() for r in records)
        fd = self._open()
        start = os.lseek(fd, 0, os.SEEK_END)  # only this process appends to this file
        try:
            n = os.write(fd, data)  # one write: the lines are either whole or torn at the very end
            if n != len(data):
                raise OSError(errno.ENOSPC, f"short write ({n} of {len(data)} bytes; disk full?)", str(self.path))
            if self.durable:
                os.fsync(fd)
        except BaseException:
            self.undo(start)
            raise
        return start

    def undo(self, start: int) -> None:
        """Cut this process's file back to ``start`` (records appended since are not recorded)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, start)
            if start == 0 and self.path is not None:
                self.path.unlink(missing_ok=True)
                self.close()
        except OSError:
            pass  # the file system refuses even that; a torn last line is skipped by readers

    def _open(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # a forked child gets its own file
            self.dir.mkdir(parents=True, exist_ok=True)
            host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40]
            self.path = self.dir / f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = os.getpid()
        return self._fd

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


def read_lines(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete records after ``offset`` and the offset just past the last complete line."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for raw in data[: end + 1].splitlines():
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a torn line from a killed writer followed by a newer process's line
        if isinstance(rec, dict) and "key" in rec and "metrics" in rec:
            records.append(rec)
    return records, offset + end + 1


def iter_files(root: Path) -> Iterator[Path]:
    """The results files of ``root``; a symlink that leads outside the registry is never read (``verify``
    lists it)."""
    d = Path(root) / "results"
    if d.is_dir() and outside(root, d) is None:
        yield from (p for p in sorted(d.glob("*.jsonl")) if outside(root, p) is None)
