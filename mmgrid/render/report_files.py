"""A report's files written all at once or not at all.

Every file of one report (report.md, report.html, the PNG figures) is first written into a
staging folder inside the output folder (the same file system), then renamed into place
(``fileio.atomic.replace``, atomic per file): figures first, report.html, report.md last. A failure
before the renames (a section that fails, a full disk) removes the staging folder and leaves
the previous complete report, or none; it never leaves a partial file under a final name.

A staging folder is named after its writer (``.report-<host>-<pid>-XXXX``): a run that was killed
(``kill -9``: no clean-up of its own) leaves it behind, and the next report written to the same
folder removes every staging folder whose writer is gone (same host, process no longer running;
another host's after :data:`STALE_S`).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Literal

from mmgrid.errors import MmgridError
from mmgrid.fileio.atomic import replace

STALE_S = 24 * 3600  # another host's staging folder older than this is litter
LAST = ("report.html", "report.md")  # renamed last, in this order: report.md appears only once the rest is in place


class ReportWriteError(MmgridError):
    """The report's files could not be written (full disk, read-only folder ...); nothing was replaced."""


def _host() -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in socket.gethostname())[:40] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by another user
        return True
    return True


def remove_stale_stages(out: Path) -> list[Path]:
    """Remove the staging folders in ``out`` whose writer is gone (see the module docstring); returns them.
    A folder of the old unnamed form (``.report-XXXX``) counts as gone once older than :data:`STALE_S`."""
    removed = []
    host, now = _host(), time.time()
    for d in Path(out).glob(".report-*"):
        if not d.is_dir() or d.is_symlink():
            continue
        parts = d.name[len(".report-"):].split("-")
        try:
            old = now - d.stat().st_mtime > STALE_S
        except OSError:
            continue
        if len(parts) >= 3 and parts[-2].isdigit():
            gone = not _alive(int(parts[-2])) if "-".join(parts[:-2]) == host else old
        else:
            gone = old
        if gone:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class StagedFiles:
    """Files staged in ``OUT/.report-XXXX/`` and moved into ``OUT`` by :meth:`commit`.

    Use as a context manager: leaving it with an exception removes the staging folder, and an
    ``OSError`` becomes a :class:`ReportWriteError` that names the folder and the fix.
    """

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            remove_stale_stages(self.out)
            self.stage = Path(tempfile.mkdtemp(prefix=f".report-{_host()}-{os.getpid()}-", dir=self.out))
        except OSError as exc:
            raise _write_error(self.out, exc) from exc
        self.committed: list[Path] = []

    def __enter__(self) -> "StagedFiles":
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> Literal[False]:
        shutil.rmtree(self.stage, ignore_errors=True)
        if isinstance(exc, OSError):
            raise _write_error(self.out, exc) from exc
        return False

    def path(self, name: str) -> Path:
        """Where to write ``name`` now (inside the staging folder)."""
        return self.stage / name

    def write_text(self, name: str, text: str) -> Path:
        """Write one text file into the staging folder; returns its final path."""
        write_bytes(self.path(name), text.encode("utf-8"))
        return self.out / name

    def commit(self) -> list[Path]:
        """Rename every staged file into the output folder (report.html, then report.md last)."""
        names = sorted(p.name for p in self.stage.iterdir() if p.is_file())
        order = [n for n in names if n not in LAST] + [n for n in LAST if n in names]
        for n in order:
            replace(self.stage / n, self.out / n)
            self.committed.append(self.out / n)
        return self.committed


def write_bytes(path: Path, data: bytes) -> None:
    """Write and flush ``data`` to ``path`` (a staging path: a failure here leaves no final file)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_error(out: Path, exc: OSError) -> ReportWriteError:
    return ReportWriteError(f"could not write the report into {out}: {exc.strerror or exc} (errno {exc.errno}). "
                            "The previous report there, if any, is unchanged. Free space or choose another folder "
                            "with --out, then rerun `mmgrid report`.")
