"""Keeping the SQLite index in line with the files it caches (a mixin of :class:`~mmgrid.registry.index.Index`).

:meth:`IndexSync.sync` picks up files written by other processes (or by workers that never
touch SQLite) incrementally: a manifest folder is listed again only when its mtime moved,
a results file is read only past the offset already ingested.

The index is checked against the files it was built from, so it never serves what the
files no longer say (git's rule for its index and pack indexes):

* the index records which registry folder it was built for (the inode of ``manifests/``):
  an index file copied in from another registry is rebuilt from the files on open;
* each results file's stamp holds its inode, the offset read and a checksum of the bytes
  just before it: a results file that vanished, was replaced or rewritten has its rows
  dropped (and is read again if it is still there), with a :class:`RegistryWarning`;
* each checkpoint row holds its manifest's stat identity (size, mtime, inode); every row a
  query returns is compared with its file (one ``stat`` per returned row), and a row whose
  manifest changed is read again, or dropped with a warning when the manifest is gone or
  broken;
* a damaged index file (not a database, malformed pages) is :class:`CorruptIndexError`
  naming the file and the fix, ``mmgrid registry reindex``, which rebuilds it whatever
  its state.
"""

from __future__ import annotations

import os
import sqlite3
import time
import warnings
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

from mmgrid.errors import RegistryError
import mmgrid.registry.aliases as alias_files
import mmgrid.registry.results as results_io
from mmgrid.registry.errors import CorruptIndexError, RegistryWarning
from mmgrid.fileio.atomic import replace, temp_path
from mmgrid.registry.manifest import read_manifest

if TYPE_CHECKING:
    from mmgrid.registry.manifest import Manifest

T = TypeVar("T")

RECENT_NS = 2_000_000_000  # re-list folders touched in the last 2 s (coarse mtimes on network file systems)
TAIL = 256  # bytes before a results file's read offset whose checksum the stamp keeps


def manifest_stat(st: os.stat_result) -> str:
    """A manifest file's stat identity as the index keeps it: size, mtime, inode (not ctime: a
    ``chmod`` of a registry made read-only changes ctime, not the manifest)."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _tail(path: Path, offset: int) -> str:
    """Checksum of the ``TAIL`` bytes before ``offset`` (what was read last time must still be there)."""
    if offset <= 0:
        return "0"
    with open(path, "rb") as fh:
        fh.seek(max(0, offset - TAIL))
        return format(zlib.crc32(fh.read(min(offset, TAIL))), "x")


def _results_stamp(stamp: str | None) -> tuple[int, int | None, int | None, str | None]:
    """(offset read, inode, mtime_ns, tail checksum) of a results file's stamp; (0, None, ...) if none."""
    if not stamp:
        return 0, None, None, None
    offset, ino, mtime, tail = stamp.split(":")
    return int(offset), int(ino), int(mtime), tail


class IndexSync:
    """Sync, rebuild and the checks of :class:`~mmgrid.registry.index.Index` against the files."""

    root: Path
    path: str
    read_only: bool
    problems: list[tuple[str, str]]
    repairs: list[str]
    schema_version: int

    if TYPE_CHECKING:  # defined by Index, the class this mixin is part of
        def write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...
        def read(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]: ...
        def close(self) -> None: ...
        @staticmethod
        def add_manifest(conn: sqlite3.Connection, m: Manifest, mstat: str | None = None) -> None: ...
        @staticmethod
        def remove_checkpoint(conn: sqlite3.Connection, cid: str) -> None: ...
        @staticmethod
        def add_record(conn: sqlite3.Connection, rec: Mapping[str, Any], src: str | None = None) -> None: ...

    # -- sync from files ---------------------------------------------------------------
    def _stamps(self, conn: sqlite3.Connection) -> dict[str, str]:
        return dict(conn.execute("SELECT path, stamp FROM sync_state").fetchall())

    def sync(self) -> int:
        """Index what other processes wrote since the last sync; returns the number of changes.

        A manifest or alias file that cannot be read is skipped (it must not block the
        index), listed in :attr:`problems` and announced with a :class:`RegistryWarning`;
        where the index disagreed with the files (a results file gone, an index built for
        another folder), the disagreement is listed in :attr:`repairs` and announced too.
        """
        self.problems = []
        n_repairs = len(self.repairs)
        n = self.write(self._sync)
        self._warn(n_repairs)
        return n

    def _skip(self, path: str, problem: str) -> None:
        if (path, problem) not in self.problems:
            self.problems.append((path, problem))

    def _repair(self, what: str) -> None:
        if what not in self.repairs:
            self.repairs.append(what)

    def _warn(self, n_repairs: int = 0) -> None:
        for path, problem in self.problems:
            warnings.warn(f"registry index skipped {path}: {problem}", RegistryWarning, stacklevel=3)
        for what in self.repairs[n_repairs:]:
            warnings.warn(f"registry index: {what}", RegistryWarning, stacklevel=3)

    def _identity(self) -> str:
        """Which registry folder this is: the inode of its ``manifests/`` folder ("" before it exists)."""
        try:
            return str(os.stat(self.root / "manifests").st_ino)
        except OSError:
            return ""

    def _sync(self, conn: sqlite3.Connection) -> int:
        if conn.execute("PRAGMA user_version").fetchone()[0] != self.schema_version:
            return self._clear_and_sync(conn)  # a new index file, or one from an older mmgrid
        built_for = conn.execute("SELECT value FROM meta WHERE key = 'root'").fetchone()
        if built_for is None or built_for[0] != self._identity():
            if built_for is not None and built_for[0]:
                self._repair(f"{self.path} was built for another registry folder (copied in, or the registry was "
                             "copied); rebuilt from this registry's files")
            return self._clear_and_sync(conn)
        stamps = self._stamps(conn)
        now = time.time_ns()
        n = self._sync_manifests(conn, stamps, now) + self._sync_aliases(conn, stamps, now)
        return n + self._sync_results(conn, stamps)

    @staticmethod
    def _changed(stamps: dict[str, str], key: str, mtime: int, now: int) -> bool:
        return stamps.get(key) != str(mtime) or now - mtime < RECENT_NS

    def _sync_manifests(self, conn: sqlite3.Connection, stamps: dict[str, str], now: int) -> int:
        mdir = self.root / "manifests"
        n = 0
        subs = {e.name: e for e in os.scandir(mdir) if e.is_dir()} if mdir.is_dir() else {}
        known_subs = {k[2:] for k in stamps if k.startswith("m:")}
        for name in sorted(set(subs) | known_subs):
            entry = subs.get(name)
            mtime = entry.stat().st_mtime_ns if entry else -1
            if entry and not self._changed(stamps, f"m:{name}", mtime, now):
                continue
            on_disk = {f[:-5] for f in os.listdir(entry.path) if f.endswith(".json")} if entry else set()
            hi = name[:-1] + chr(ord(name[-1]) + 1) if name else ""
            indexed = {r[0] for r in conn.execute("SELECT id FROM checkpoints WHERE id >= ? AND id < ?", (name, hi))}
            for cid in sorted(on_disk - indexed):
                assert entry is not None  # on_disk is empty without a folder entry
                path = Path(entry.path) / f"{cid}.json"
                if self._index_manifest(conn, cid, path):
                    n += 1
            for cid in indexed - on_disk:
                self.remove_checkpoint(conn, cid)
                n += 1
            if entry:
                conn.execute("INSERT OR REPLACE INTO sync_state VALUES (?,?)", (f"m:{name}", str(mtime)))
            else:
                conn.execute("DELETE FROM sync_state WHERE path = ?", (f"m:{name}",))
        return n

    def _index_manifest(self, conn: sqlite3.Connection, cid: str, path: Path) -> bool:
        """Index one manifest file; False (and listed in :attr:`problems`) when it cannot be read."""
        try:
            st = os.stat(path)
            m = read_manifest(path)
            if m.id != cid:
                raise RegistryError(f"manifest {path} claims id {m.id}; the file was renamed or edited.")
            self.add_manifest(conn, m, manifest_stat(st))
        except (RegistryError, OSError) as exc:
            self._skip(str(path), str(exc))  # one bad file must not block the index; verify() lists it too
            return False
        return True

    def _sync_aliases(self, conn: sqlite3.Connection, stamps: dict[str, str], now: int) -> int:
        adir = self.root / "aliases"
        mtime = adir.stat().st_mtime_ns if adir.is_dir() else -1
        if not self._changed(stamps, "aliases", mtime, now) or mtime < 0:
            return 0
        rows, bad = alias_files.scan(self.root)
        for path, problem in bad:
            self._skip(path, problem)
        old = set(conn.execute("SELECT name, id, created FROM aliases").fetchall())
        conn.execute("INSERT OR REPLACE INTO sync_state VALUES (?,?)", ("aliases", str(mtime)))
        if old == set(rows):
            return 0
        conn.execute("DELETE FROM aliases")
        conn.executemany("INSERT INTO aliases VALUES (?,?,?)", rows)
        return len(old ^ set(rows))

    def _drop_results_of(self, conn: sqlite3.Connection, name: str, why: str) -> int:
        n = conn.execute("SELECT COUNT(DISTINCT key) FROM results WHERE src = ?", (name,)).fetchone()[0]
        conn.execute("DELETE FROM results WHERE src = ?", (name,))
        if n:
            self._repair(f"results file {self.root / 'results' / name} {why}: its {n} record(s) were dropped from the "
                         "index and it is read again if it is there (restore it from a backup if it was not changed "
                         "on purpose; results files are append-only)")
        return n

    def _sync_results(self, conn: sqlite3.Connection, stamps: dict[str, str]) -> int:
        n = 0
        on_disk = {p.name: p for p in results_io.iter_files(self.root)}
        for key in [k for k in stamps if k.startswith("r:") and k[2:] not in on_disk]:
            n += self._drop_results_of(conn, key[2:], "is gone")
            conn.execute("DELETE FROM sync_state WHERE path = ?", (key,))
        for name, path in on_disk.items():
            key = f"r:{name}"
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            offset, ino, mtime, tail = _results_stamp(stamps.get(key))
            if ino is not None:
                if ino == st.st_ino and st.st_size == offset and mtime == st.st_mtime_ns:
                    continue  # unchanged since the last sync
                if ino != st.st_ino or st.st_size < offset or _tail(path, offset) != tail:
                    n += self._drop_results_of(conn, name, "was replaced, truncated or rewritten")
                    offset = 0
            if st.st_size > offset:
                records, offset = results_io.read_lines(path, offset)
                for rec in records:
                    try:
                        self.add_record(conn, rec, name)
                    except (KeyError, TypeError, ValueError, AttributeError) as exc:
                        self._skip(str(path), f"record {rec.get('key')!r} is malformed ({exc!r}); the file was edited: "
                                              "restore it from a backup or delete that line.")
                        continue
                    n += 1
            conn.execute("INSERT OR REPLACE INTO sync_state VALUES (?,?)",
                         (key, f"{offset}:{st.st_ino}:{st.st_mtime_ns}:{_tail(path, offset)}"))
        return n

    def rebuild(self) -> int:
        """Forget everything and index all files again (``mmgrid registry reindex``), whatever state
        the index file is in: a damaged file (not a database, malformed) is replaced by a new one.
        Files that cannot be read are skipped and listed in :attr:`problems` (see :meth:`sync`)."""
        self.problems = []
        n_repairs = len(self.repairs)
        try:
            n = self.write(self._clear_and_sync)
        except CorruptIndexError:
            if self.path == ":memory:" or self.read_only:
                raise
            self._replace_damaged_file()
            n = self.write(self._clear_and_sync)
        self._warn(n_repairs)
        return n

    def _replace_damaged_file(self) -> None:
        """Move a damaged index file into ``tmp/`` (kept for a look until ``gc`` removes it) and drop its
        -wal/-shm files, which belong to it; the next connection creates a new index file."""
        self.close()
        for suffix in ("-wal", "-shm", "-journal"):
            Path(self.path + suffix).unlink(missing_ok=True)
        if os.path.exists(self.path):
            tmp = self.root / "tmp"
            tmp.mkdir(exist_ok=True)
            replace(Path(self.path), temp_path(tmp, "index.sqlite.damaged"))

    def _clear_and_sync(self, conn: sqlite3.Connection) -> int:
        for table in ("checkpoints", "coord_kv", "edges", "aliases", "results", "sync_state", "meta"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute(f"PRAGMA user_version={self.schema_version}")
        conn.execute("INSERT INTO meta VALUES ('root', ?)", (self._identity(),))
        return self._sync(conn)

    # -- checks against the files -----------------------------------------------------
    def _manifest_path(self, cid: str) -> Path:
        return self.root / "manifests" / cid[:2] / f"{cid}.json"

    def _stale(self, pairs: Iterable[tuple[str, str | None]]) -> list[str]:
        """Ids whose manifest's stat identity is not the one indexed (changed, gone, unreadable).

        The hot path of every query: one ``os.stat`` per checkpoint on plain strings (no pathlib)."""
        out = []
        mdir, stat = os.fsencode(self.root / "manifests"), os.stat
        for cid, mstat in pairs:
            try:
                st = stat(b"%s/%s/%s.json" % (mdir, cid[:2].encode(), cid.encode()))
            except (OSError, ValueError):
                out.append(cid)
                continue
            if f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}" != mstat:
                out.append(cid)
        return out

    def _refresh(self, cids: list[str]) -> None:
        """Read the manifests of ``cids`` again: re-index the valid ones, drop the rest (with a warning)."""
        self.problems = []
        n_repairs = len(self.repairs)

        def fn(conn: sqlite3.Connection) -> None:
            for cid in cids:
                path = self._manifest_path(cid)
                if not path.exists():
                    self.remove_checkpoint(conn, cid)
                    self._repair(f"manifest {path} is gone: its checkpoint was dropped from the index")
                elif not self._index_manifest(conn, cid, path):
                    self.remove_checkpoint(conn, cid)
                    self._repair(f"manifest {path} changed and cannot be read: its checkpoint was dropped from the "
                                 "index (`mmgrid registry verify` lists it; restore it from a backup)")

        self.write(fn)
        self._warn(n_repairs)

    def compare(self, fresh: "IndexSync") -> list[str]:
        """How this index disagrees with ``fresh``, an index just built from the files (``verify``)."""
        out = []
        ck = "SELECT id, kind, seed, coords, params FROM checkpoints"
        mine, theirs = set(self.read(ck)), set(fresh.read(ck))
        ids_m, ids_t = {r[0] for r in mine}, {r[0] for r in theirs}
        if ids_m - ids_t:
            out.append(f"it lists {len(ids_m - ids_t)} checkpoints with no valid manifest "
                       f"({', '.join(sorted(ids_m - ids_t)[:5])})")
        if ids_t - ids_m:
            out.append(f"it lacks {len(ids_t - ids_m)} checkpoints whose manifests exist "
                       f"({', '.join(sorted(ids_t - ids_m)[:5])})")
        changed = {r[0] for r in mine ^ theirs} & ids_m & ids_t
        if changed:
            out.append(f"{len(changed)} checkpoints differ from their manifests ({', '.join(sorted(changed)[:5])})")
        res = "SELECT key, metric, id, recipe_hash, split, grp, value, ci_low, ci_high, extra FROM results"
        mine_r, theirs_r = set(self.read(res)), set(fresh.read(res))
        if mine_r - theirs_r:
            out.append(f"it serves {len(mine_r - theirs_r)} result rows that no results file holds as indexed")
        if theirs_r - mine_r:
            out.append(f"it lacks {len(theirs_r - mine_r)} result rows of the results files")
        return out
