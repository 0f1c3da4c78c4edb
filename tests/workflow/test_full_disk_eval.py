"""A recording ``mmgrid eval`` on a disk that fills while it writes its results: a named error
(exit 2, no traceback), every results file byte-identical to before, ``registry verify`` clean
afterwards, and the same command records once the space is back."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _results(reg: Path) -> dict[str, str]:
    return {str(p.relative_to(reg)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((reg / "results").rglob("*")) if p.is_file()}


def _main(*argv: str) -> tuple[int, str]:
    from mmgrid.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(argv))
    return rc, err.getvalue()


def test_a_recording_eval_on_a_full_disk_leaves_the_results_as_they_were(quick_demo: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import mmgrid.registry.results as results_io

    run = tmp_path / "run"
    shutil.copytree(quick_demo, run, symlinks=True)
    reg = run / "registry"
    assert _main("query", "--registry", str(run))[0] == 0  # the copy's index settles before the snapshot
    before = _results(reg)

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(results_io.os, "write", full)
        rc, err = _main("eval", "--registry", str(run), "books-text-p2", "eval.max_users=20")
    assert rc == 2, err
    assert "Traceback" not in err and "No space left on device" in err and "free space" in err, err
    assert _results(reg) == before
    rc, err = _main("registry", "verify", str(reg))
    assert rc == 0, err
    rc, err = _main("eval", "--registry", str(run), "books-text-p2", "eval.max_users=20")
    assert rc == 0, err
    assert _results(reg) != before  # recorded now that the space is back
