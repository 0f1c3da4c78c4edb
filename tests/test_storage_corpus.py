"""The bad-input corpus's storage table: storage, derived state and concurrency.

The corpus of :mod:`tests.test_bad_input_corpus` covers bad *input*; this table covers what lies
around the registry's source of truth: storage that is read-only, full or failing, derived
state (``index.sqlite``) that disagrees with the files, and writers racing ``gc``. One id per
case, three kinds of expectation:

* a named error (an :class:`mmgrid.errors.MmgridError` subclass, or for the command line exit
  status 2 with one ``mmgrid: error:`` line and no traceback) whose message names where, what
  and how to fix it, and **nothing written** (names and sizes of every file under the case's
  folder are the same before and after; SQLite's ``-wal``/``-shm`` side files excepted);
* ``SERVED``: a read that works and serves only what the files say (``check`` asserts it); only
  the index cache may change (it is brought in line with the files);
* the case's own check of what was (not) written, where more than "nothing" must hold.

Read-only storage is a read-only bind mount as root (root ignores permission bits, not EROFS) or
``chmod -R a-w`` as another user; a full disk is a 2 MiB tmpfs (root) or a short ``os.write``.
Cases needing a mount are skipped where none can be made. The counts are printed at the end.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from mmgrid.errors import MmgridError, RegistryError, StorageError
from tests.registry.test_storage import CAN_MOUNT  # the one probe: can this process mount a tmpfs?
from mmgrid.registry.errors import CorruptIndexError, ReadOnlyRegistryError, RegistryStorageError, RegistryWarning

CLI = "exit status 2"
SERVED = "served"
COORDS = {"paradigm": "text", "domain": "Books", "period": "p0"}
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    kind: str  # storage | derived | concurrency
    setup: Callable[[Path, contextlib.ExitStack], Callable[[], Any]]  # builds the case under tmp; returns the action
    error: Any  # an MmgridError subclass, CLI or SERVED
    where: str = ""  # regexes the message must match ("{tmp}" stands for the case's folder)
    what: str = ""
    fix: str = ""
    check: Callable[[Path, Any], None] | None = None  # SERVED: asserts what the action returned / left
    written: str = "nothing"  # "nothing" | "index" (only index.sqlite may change) | "checked" (by check)
    needs_mount: bool = False


CASES: dict[str, Case] = {}


def case(cid: str, kind: str, setup: Any, error: Any, where: str = "", what: str = "", fix: str = "",
         **kw: Any) -> None:
    assert cid not in CASES, cid
    CASES[cid] = Case(kind, setup, error, where, what, fix, **kw)


# ----------------------------------------------------------------------------- helpers
def tiny(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": torch.randn(16, 8, generator=g), "layer.weight": torch.randn(8, 8, generator=g)}


def filled(root: Path) -> list[str]:
    """A closed registry: two checkpoints, an alias, one evaluation (three groups, per-user values)."""
    from mmgrid.registry import Registry

    with contextlib.closing(Registry.open(root)) as reg:
        base = reg.put(tiny(0), COORDS, "base")
        stage = reg.put(tiny(1), {**COORDS, "period": "p1"}, "trained", parents=[(base, "previous_stage")])
        reg.alias("last", stage)
        active = np.arange(12) % 2 == 0
        with reg.recording():
            rel = reg.put_per_user(np.arange(12), active, {"recall@10": np.linspace(0, 1, 12)})
            for group in ("all", "active", "non_active"):
                reg.record_eval(stage, "test", group, {"recall@10": 0.5}, extra={"per_user": rel})
    return [base, stage]


def cli(*argv: Any) -> tuple[int, str]:
    from mmgrid.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", RegistryWarning)
        rc = main([str(a) for a in argv])
    return rc, err.getvalue()




def read_only_view(src: Path, stack: contextlib.ExitStack) -> Path:
    """``src`` made read-only (see the module docstring); undone when the case ends."""
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(src)], check=True)
        stack.callback(subprocess.run, ["chmod", "-R", "u+w", str(src)], check=True)
        return src
    ro = src.parent / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(ro)], check=True)
    stack.callback(subprocess.run, ["umount", "-l", str(ro)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
    return ro


def tmpfs(path: Path, stack: contextlib.ExitStack, size: str = "2m") -> Path:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    stack.callback(subprocess.run, ["umount", "-l", str(path)], check=True)
    return path


def _open(root: Path, **kw: Any) -> Any:
    from mmgrid.registry import Registry

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegistryWarning)
        return Registry.open(root, **kw)


# ----------------------------------------------------------------------------- storage: read-only
def _ro(action: Callable[[Any, Path, list[str]], Any]) -> Callable[[Path, contextlib.ExitStack], Callable[[], Any]]:
    def setup(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
        ids = filled(tmp / "reg")
        ro = read_only_view(tmp / "reg", stack)
        return lambda: action(ro, tmp, ids)

    return setup


RO_FIX = "copy it somewhere writable|remount it read-write"
case("storage: put on a read-only registry", "storage",
     _ro(lambda ro, t, ids: _open(ro).put(tiny(5), {**COORDS, "period": "p5"}, "base")),
     ReadOnlyRegistryError, r"registry .*/ro", "read-only", RO_FIX, needs_mount=True)
case("storage: record_eval on a read-only registry", "storage",
     _ro(lambda ro, t, ids: _open(ro).record_eval(ids[0], "test", "all", {"recall@10": 1.0})),
     ReadOnlyRegistryError, r"registry .*/ro", "read-only.*recording an evaluation", RO_FIX, needs_mount=True)
case("storage: cli registry gc on a read-only registry", "storage",
     _ro(lambda ro, t, ids: cli("registry", "gc", ro, "--grace", "0")), CLI, r"registry .*/ro", "read-only.*gc",
     RO_FIX, needs_mount=True)
case("storage: cli registry alias on a read-only registry", "storage",
     _ro(lambda ro, t, ids: cli("registry", "alias", ro, "x", ids[0])), CLI, r"registry .*/ro", "read-only.*alias",
     RO_FIX, needs_mount=True)
case("storage: cli registry reindex on a read-only registry", "storage",
     _ro(lambda ro, t, ids: cli("registry", "reindex", ro)), CLI, r"registry .*/ro", "read-only.*reindex", RO_FIX,
     needs_mount=True)


def _ro_reads(ro: Path, tmp: Path, ids: list[str]) -> list[int]:
    return [cli(*argv)[0] for argv in (["query", ro], ["results", ro], ["show", ids[0], "--registry", ro],
                                       ["lineage", "last", "--registry", ro], ["registry", "verify", ro])]


case("storage: cli reads of a read-only registry work", "storage", _ro(_ro_reads), SERVED,
     check=lambda tmp, out: out == [0, 0, 0, 0, 0] or pytest.fail(f"exit statuses {out}"), needs_mount=True)


# ----------------------------------------------------------------------------- storage: full disk, OS errors
def _full_put(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    reg = _open(tmpfs(tmp / "disk", stack) / "reg")
    stack.callback(reg.close)
    base = reg.put(tiny(0), COORDS, "base")
    return lambda: reg.put({"w": torch.randn(1024, 1024)}, {**COORDS, "period": "p1"}, "trained",
                           parents=[(base, "previous_stage")])


case("storage: put larger than the free space", "storage", _full_put, RegistryStorageError, "registry {tmp}/disk/reg",
     "No space left on device", "free space", needs_mount=True)


def _short_write(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    import mmgrid.registry.results as results_io

    reg = _open(tmp / "reg")
    stack.callback(reg.close)
    cid = reg.put(tiny(0), COORDS, "base")
    real = os.write

    def run() -> Any:
        stack.enter_context(pytest.MonkeyPatch.context()).setattr(
            results_io.os, "write", lambda fd, data: real(fd, bytes(data)[:7]))
        with reg.recording():
            rel = reg.put_per_user(np.arange(4), np.arange(4) < 2, {"recall@10": np.ones(4)})
            for g in ("all", "active", "non_active"):
                reg.record_eval(cid, "test", g, {"recall@10": 1.0}, extra={"per_user": rel})

    return run


case("storage: three group rows on a disk that fills mid-write", "storage", _short_write, RegistryStorageError,
     r"results/.*\.jsonl", "short write", "free space")


def _escaping_oserror(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    from mmgrid.registry.api import Registry

    filled(tmp / "reg")

    def boom(self: Any, **kw: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error", str(self.root / "index.sqlite"))

    stack.enter_context(pytest.MonkeyPatch.context()).setattr(Registry, "query", boom)
    return lambda: cli("query", tmp / "reg")


case("storage: cli an OSError escaping a command", "storage", _escaping_oserror, CLI, r"reg/index\.sqlite",
     "Input/output error", "disk may be failing")


# ----------------------------------------------------------------------------- derived state
def _damaged_index(how: str, action: Callable[[Path], Any]) -> Callable[[Path, contextlib.ExitStack], Callable[[], Any]]:
    def setup(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
        filled(tmp / "reg")
        index = tmp / "reg" / "index.sqlite"
        data = index.read_bytes()
        index.write_bytes(data[: len(data) // 2] if how == "truncated" else np.random.default_rng(1).bytes(len(data)))
        return lambda: action(tmp / "reg")

    return setup


REINDEX = r"mmgrid registry reindex"
case("derived: truncated index, query", "derived", _damaged_index("truncated", lambda r: _open(r).query()),
     CorruptIndexError, r"reg/index\.sqlite", "damaged", REINDEX)
case("derived: garbage index, results", "derived", _damaged_index("garbage", lambda r: _open(r).results()),
     CorruptIndexError, r"reg/index\.sqlite", "not a database", REINDEX)
case("derived: garbage index, put refused before writing", "derived",
     _damaged_index("garbage", lambda r: _open(r).put(tiny(3), {**COORDS, "period": "p3"}, "base")),
     CorruptIndexError, r"reg/index\.sqlite", "damaged", REINDEX)
case("derived: cli query on a truncated index", "derived", _damaged_index("truncated", lambda r: cli("query", r)),
     CLI, r"reg/index\.sqlite", "damaged", REINDEX)
case("derived: cli reindex repairs a garbage index", "derived",
     _damaged_index("garbage", lambda r: (cli("registry", "reindex", r)[0], len(_open(r).query()))), SERVED,
     check=lambda tmp, out: out == (0, 2) or pytest.fail(f"reindex gave {out}"), written="index")


def _files_changed(change: Callable[[Path, list[str]], None], read: Callable[[Any], Any]
                   ) -> Callable[[Path, contextlib.ExitStack], Callable[[], Any]]:
    def setup(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
        ids = filled(tmp / "reg")
        _open(tmp / "reg").close()  # the index agrees with the files
        change(tmp / "reg", ids)
        return lambda: read(_open(tmp / "reg"))

    return setup


def _foreign(root: Path, ids: list[str]) -> None:
    other = root.parent / "other"
    with contextlib.closing(_open(other)) as reg:
        cid = reg.put(tiny(9), {**COORDS, "domain": "Games"}, "base")
        reg.record_eval(cid, "test", "all", {"recall@10": 0.9})
    shutil.copy(other / "index.sqlite", root / "index.sqlite")
    shutil.rmtree(other)


def _break(root: Path, ids: list[str]) -> None:
    path = root / "manifests" / ids[0][:2] / f"{ids[0]}.json"
    with open(path, "r+b") as fh:
        fh.write(b"{")
        fh.truncate()


case("derived: a results file deleted", "derived",
     _files_changed(lambda r, ids: [p.unlink() for p in (r / "results").glob("*.jsonl")], lambda reg: reg.results()),
     SERVED, check=lambda tmp, df: df.empty or pytest.fail(f"{len(df)} rows served"), written="index")
case("derived: a foreign index.sqlite copied in", "derived",
     _files_changed(_foreign, lambda reg: (set(reg.query()["domain"]), set(reg.results()["value"]))), SERVED,
     check=lambda tmp, out: out == ({"Books"}, {0.5}) or pytest.fail(f"served {out}"), written="index")
case("derived: a manifest broken in place", "derived", _files_changed(_break, lambda reg: len(reg.query())),
     SERVED, check=lambda tmp, n: n == 1 or pytest.fail(f"{n} checkpoints served"), written="index")
case("derived: verify after a results file deleted", "derived",
     _files_changed(lambda r, ids: [p.unlink() for p in (r / "results").glob("*.jsonl")],
                    lambda reg: reg.verify()), SERVED,
     check=lambda tmp, rep: (not rep.ok and "is gone" in rep.summary()) or pytest.fail(rep.summary()),
     written="index")


# ----------------------------------------------------------------------------- round 3: links out of the root, caches,
# litter, canonical ids (each case fails without its fix)
def _link_out(which: str) -> Callable[[Path, list[str]], None]:
    """Replace one of the registry's files by a symlink to a copy outside its root (the copy says otherwise)."""
    def change(root: Path, ids: list[str]) -> None:
        outside = root.parent / "outside"
        outside.mkdir(exist_ok=True)
        if which == "results":
            src = next((root / "results").glob("*.jsonl"))
            text = src.read_text().replace('"recall@10":0.5', '"recall@10":0.25')
            assert "0.25" in text
            (outside / "evil.jsonl").write_text(text.replace('"key":"', '"key":"x'))
            (root / "results" / "evil.jsonl").symlink_to(outside / "evil.jsonl")
        elif which == "alias":
            (outside / "evil.json").write_text('{"id": "%s"}' % ids[0])
            (root / "aliases" / "evil.json").symlink_to(outside / "evil.json")
        elif which == "manifest":
            path = root / "manifests" / ids[1][:2] / f"{ids[1]}.json"
            shutil.move(path, outside / path.name)
            path.symlink_to(outside / path.name)
        elif which == "blob":
            blob = next(p for p in (root / "blobs").rglob("*") if p.is_file())
            shutil.move(blob, outside / blob.name)
            blob.symlink_to(outside / blob.name)

    return change


def _verify_lists_link(tmp: Path, rep: Any) -> None:
    if rep.ok or "link out of the registry" not in rep.summary() or str(tmp / "outside") not in rep.summary():
        pytest.fail(rep.summary())


case("derived: a results file linked out of the root is not read", "derived",
     _files_changed(_link_out("results"), lambda reg: sorted(set(reg.results()["value"]))), SERVED,
     check=lambda tmp, vals: vals == [0.5] or pytest.fail(f"served {vals}"), written="index")
case("derived: verify lists a results file linked out of the root", "derived",
     _files_changed(_link_out("results"), lambda reg: reg.verify()), SERVED, check=_verify_lists_link, written="index")
case("derived: an alias linked out of the root is refused", "derived",
     _files_changed(_link_out("alias"), lambda reg: reg.resolve("evil")), RegistryError, r"aliases/evil\.json",
     r"a link to .*outside.*outside the registry", "replace the link", written="index")
case("derived: verify lists an alias linked out of the root", "derived",
     _files_changed(_link_out("alias"), lambda reg: reg.verify()), SERVED, check=_verify_lists_link, written="index")
case("derived: a manifest linked out of the root is refused", "derived",
     _files_changed(_link_out("manifest"), lambda reg: [reg.get(i) for i in reg.query()["id"]]), RegistryError,
     r"manifests/", r"a link to .*outside the registry", "replace the link", written="index")
case("derived: verify lists a manifest linked out of the root", "derived",
     _files_changed(_link_out("manifest"), lambda reg: reg.verify()), SERVED, check=_verify_lists_link, written="index")
case("derived: a blob linked out of the root is refused", "derived",
     _files_changed(_link_out("blob"), lambda reg: [reg.load(i) for i in reg.query()["id"]]), RegistryError,
     r"blobs/", r"a link to .*outside the registry", "replace the link", written="index")


def _verify_read_only(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    ids = filled(tmp / "reg")
    _open(tmp / "reg").close()
    ro = read_only_view(tmp / "reg", stack)
    return lambda: (cli("registry", "verify", ro), _open(ro).verify())


case("storage: registry verify on a read-only mount reports without writing", "storage", _verify_read_only, SERVED,
     check=lambda tmp, out: (out[0][0] == 0 and "Traceback" not in out[0][1] and out[1].ok
                             and out[1].blobs_checked > 0) or pytest.fail(f"{out[0]} {out[1].summary()}"),
     needs_mount=True)


def _grid_after_sync(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    from mmgrid.query import Grid

    ids = filled(tmp / "reg")
    grid = Grid.open(tmp / "reg")
    stack.callback(grid.registry.close)
    before = len(grid.descendants(ids[0]))
    with contextlib.closing(_open(tmp / "reg")) as other:  # another process adds a child
        other.put(tiny(7), {**COORDS, "period": "p2"}, "trained", parents=[(ids[1], "previous_stage")])

    def run() -> Any:
        grid.registry.sync()
        return before, len(grid.descendants(ids[0])), len(grid.registry.query())

    return run


case("derived: Grid.descendants follows sync()", "derived", _grid_after_sync, SERVED,
     check=lambda tmp, out: out == (1, 2, 3) or pytest.fail(f"(before, after, checkpoints) = {out}"), written="checked")


def _grid_summary_typo(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    from mmgrid.query import Grid

    filled(tmp / "reg")
    grid = Grid.open(tmp / "reg")
    stack.callback(grid.registry.close)
    return lambda: grid.summary("recal@10", kind=None)


case("derived: Grid.summary of a misspelt metric names the recorded ones", "derived", _grid_summary_typo,
     MmgridError, r"summary", r"metric='recal@10' matches no row", r"did you mean 'recall@10'")


def _killed_report_stage(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    from mmgrid.render.report_files import StagedFiles

    out = tmp / "report"
    code = ("import os, sys; from mmgrid.render.report_files import StagedFiles; s = StagedFiles(sys.argv[1]);"
            "open(os.path.join(s.stage, 'report.html'), 'w').write('x' * 100000); os._exit(9)")  # killed: no clean-up
    subprocess.run([sys.executable, "-c", code, str(out)], env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    left = [p.name for p in out.glob(".report-*")]

    def run() -> Any:
        with StagedFiles(out) as files:
            files.write_text("report.md", "ok")
            files.commit()
        return left, sorted(p.name for p in out.iterdir())

    return run


case("storage: a killed report's staging folder is removed by the next report", "storage", _killed_report_stage,
     SERVED, check=lambda tmp, out: (len(out[0]) == 1 and out[1] == ["report.md"]) or pytest.fail(f"{out}"),
     written="checked")


def _canonical_lambda(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    from mmgrid.configtools import parse_override
    from mmgrid.merge.recipe import Recipe, run_recipe

    reg = _open(tmp / "reg")
    stack.callback(reg.close)
    a = reg.put(tiny(0), COORDS, "base")
    b = reg.put(tiny(1), {**COORDS, "period": "p1"}, "trained", parents=[(a, "previous_stage")])

    def run() -> Any:
        ids = []
        for text in ("lambda=1.3", "lambda=13e-1", "lam=1.30", "lambda='1.3'"):
            key, value = parse_override(text)
            ids.append(run_recipe(Recipe("temporal", [a, b], None, {key[0]: value}), reg, dry_run=True))
        return ids

    return run


case("derived: --set lambda=13e-1 names the merge of lambda=1.3", "derived", _canonical_lambda, SERVED,
     check=lambda tmp, ids: len(set(ids)) == 1 or pytest.fail(f"ids {ids}"), written="checked")


# ----------------------------------------------------------------------------- concurrency
def _gc_inside_recording(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    reg = _open(tmp / "reg")
    stack.callback(reg.close)
    reg.put(tiny(0), COORDS, "base")

    def run() -> Any:
        with reg.recording():
            reg.gc(grace_s=0)

    return run


case("concurrency: gc inside a write of the same registry", "concurrency", _gc_inside_recording, RegistryError,
     "gc", "inside a write", "run gc after it")


def _gc_vs_paused_put(tmp: Path, stack: contextlib.ExitStack) -> Callable[[], Any]:
    root, flag = tmp / "reg", tmp / "flag"
    _open(root).put(tiny(0), COORDS, "base")
    env = {**os.environ, "MMGRID_REGISTRY_PAUSE": "manifest_tmp_written", "MMGRID_REGISTRY_PAUSE_FILE": str(flag),
           "MMGRID_REGISTRY_PAUSE_S": "1.5", "PYTHONPATH": str(ROOT)}

    def run() -> Any:
        proc = subprocess.Popen([sys.executable, "-m", "tests.registry.workers", str(root), "5"], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while not flag.exists():
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()
            time.sleep(0.02)
        report = _open(root).gc(grace_s=0)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        from mmgrid.registry.store import forget_verified

        forget_verified()
        reg = _open(root)
        return report.removed_blobs, reg.verify().ok, len(reg.load(out.decode().split()[-1]))

    return run


case("concurrency: gc --grace 0 while a put is between its blobs and its manifest", "concurrency", _gc_vs_paused_put,
     SERVED, check=lambda tmp, out: out == (0, True, 3) or pytest.fail(f"gc removed, verify, tensors: {out}"),
     written="checked")


# ----------------------------------------------------------------------------- the test
IGNORED = re.compile(r"(-wal|-shm|-journal)$|__pycache__|/flag$")


def snapshot(root: Path, index_too: bool = True) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")
                  if not IGNORED.search(str(p)) and (index_too or "index.sqlite" not in p.name)
                  and "/ro/" not in f"/{p.relative_to(root)}")


COUNTS = {"cases": 0, "named": 0, "served": 0, "wrote_nothing": 0}


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    line = (f"storage corpus: {COUNTS['cases']} cases run of {len(CASES)}, {COUNTS['named']} named errors, "
            f"{COUNTS['served']} served only what the files say, {COUNTS['wrote_nothing']} wrote nothing")
    if tr is not None:
        request.config.add_cleanup(lambda: tr.write_line(line))


def test_the_storage_corpus_covers_every_kind() -> None:
    kinds = {c.kind for c in CASES.values()}
    assert kinds == {"storage", "derived", "concurrency"}
    assert len(CASES) >= 20


@pytest.mark.parametrize("cid", list(CASES))
def test_storage_case(tmp_path: Path, cid: str) -> None:
    c = CASES[cid]
    if c.needs_mount and os.geteuid() == 0 and not CAN_MOUNT:
        pytest.skip("needs a mount (root without mount rights here)")
    if c.needs_mount and os.geteuid() != 0 and "put larger" in cid:
        pytest.skip("a full disk needs a tmpfs mount (root)")
    COUNTS["cases"] += 1
    with contextlib.ExitStack() as stack:
        action = c.setup(tmp_path, stack)
        before = snapshot(tmp_path, index_too=c.written == "nothing")
        if c.error is SERVED:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RegistryWarning)
                out = action()
            c.check(tmp_path, out)
            COUNTS["served"] += 1
            if c.written == "checked":
                return
            assert snapshot(tmp_path, index_too=c.written == "nothing") == before, "a file other than the index changed"
            COUNTS["wrote_nothing"] += c.written == "nothing"
            return
        if c.error is CLI:
            rc, msg = action()
            assert rc == 2, msg
            assert "Traceback" not in msg and msg.startswith("mmgrid: error: ") and msg.count("\n") == 1, msg
        else:
            with pytest.raises(MmgridError) as ei, warnings.catch_warnings():
                warnings.simplefilter("ignore", RegistryWarning)
                action()
            assert isinstance(ei.value, c.error), f"{type(ei.value).__name__}: {ei.value}"
            msg = str(ei.value)
        for part, rx in (("where", c.where), ("what", c.what), ("fix", c.fix)):
            assert re.search(rx.replace("{tmp}", re.escape(str(tmp_path))), msg, re.I), f"{part} {rx!r} not in: {msg}"
        COUNTS["named"] += 1
        assert snapshot(tmp_path, index_too=c.written == "nothing") == before, "something was written"
        COUNTS["wrote_nothing"] += 1


def test_storage_errors_are_named_classes() -> None:
    for c in CASES.values():
        if c.error not in (CLI, SERVED):
            assert issubclass(c.error, MmgridError)
    assert issubclass(RegistryStorageError, StorageError) and issubclass(RegistryStorageError, RegistryError)
