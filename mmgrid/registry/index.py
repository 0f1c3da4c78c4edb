"""The SQLite index: a rebuildable cache of manifests, aliases and results files.

WAL mode lets readers run while one process writes; every write transaction starts with
``BEGIN IMMEDIATE`` (take the write lock up front, so two writers never deadlock on a
lock upgrade) under a long ``busy_timeout``, and is retried on "database is locked".
:meth:`Index.sync` picks up files written by other processes (or by workers that never
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

On a registry that cannot be written (``read_only=True``) the index file is opened
read-only and copied into memory, where the same checks bring it up to date: reading a
read-only registry writes nothing, and needs no ``-wal``/``-shm`` files.
"""

from __future__ import annotations

import errno
import json
import os
import random
import sqlite3
import time
import urllib.parse
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from mmgrid.errors import RegistryError, describe_os_error
import mmgrid.registry.aliases as alias_files
import mmgrid.registry.results as results_io
from mmgrid.registry.fsio import temp_path
from mmgrid.registry.errors import (CorruptIndexError, IndexLockedError, ReadOnlyRegistryError, RegistryStorageError,
                                    RegistryWarning)
from mmgrid.registry.manifest import Manifest, read_manifest

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints(
  id TEXT PRIMARY KEY, paradigm TEXT NOT NULL, domain TEXT NOT NULL, period TEXT NOT NULL,
  variant TEXT NOT NULL, kind TEXT NOT NULL, method TEXT, seed INTEGER, created TEXT, coords TEXT, params TEXT,
  n_tensors INTEGER, nbytes INTEGER, mstat TEXT);
CREATE INDEX IF NOT EXISTS ck_coords ON checkpoints(paradigm, domain, period, variant);
CREATE INDEX IF NOT EXISTS ck_domain ON checkpoints(domain, period);
CREATE INDEX IF NOT EXISTS ck_period ON checkpoints(period);
CREATE INDEX IF NOT EXISTS ck_kind ON checkpoints(kind);
CREATE INDEX IF NOT EXISTS ck_seed ON checkpoints(seed);
CREATE TABLE IF NOT EXISTS coord_kv(id TEXT NOT NULL, key TEXT NOT NULL, value, PRIMARY KEY(id, key));
CREATE INDEX IF NOT EXISTS coord_kv_kv ON coord_kv(key, value);
CREATE TABLE IF NOT EXISTS edges(
  child TEXT NOT NULL, pos INTEGER NOT NULL, parent TEXT NOT NULL, role TEXT NOT NULL,
  method TEXT, params TEXT, PRIMARY KEY(child, pos));
CREATE INDEX IF NOT EXISTS edges_parent ON edges(parent);
CREATE TABLE IF NOT EXISTS aliases(name TEXT PRIMARY KEY, id TEXT NOT NULL, created TEXT);
CREATE TABLE IF NOT EXISTS results(
  key TEXT NOT NULL, metric TEXT NOT NULL, id TEXT, recipe_hash TEXT, recipe TEXT,
  split TEXT, grp TEXT, value REAL, ci_low REAL, ci_high REAL, extra TEXT, created TEXT, src TEXT,
  PRIMARY KEY(key, metric));
CREATE INDEX IF NOT EXISTS res_id ON results(id);
CREATE INDEX IF NOT EXISTS res_src ON results(src);
CREATE INDEX IF NOT EXISTS res_metric ON results(metric, split, grp);
CREATE TABLE IF NOT EXISTS sync_state(path TEXT PRIMARY KEY, stamp TEXT);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
"""
SCHEMA_VERSION = 5  # bump when the schema changes: older index files are rebuilt from the files
CK_COLS = ("id", "paradigm", "domain", "period", "variant", "kind", "method", "seed", "created", "n_tensors", "nbytes",
           "coords", "params")
CK_DIRECT = CK_COLS[:8]  # filters on a column of their own (the rest: coord_kv rows)
STD = ("paradigm", "domain", "period", "variant")
RECENT_NS = 2_000_000_000  # re-list folders touched in the last 2 s (coarse mtimes on network file systems)
TAIL = 256  # bytes before a results file's read offset whose checksum the stamp keeps
CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
STORAGE_CODES = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN)
READONLY_CODES = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM)


def manifest_stat(st: os.stat_result) -> str:
    """A manifest file's stat identity as the index keeps it: size, mtime, inode (not ctime: a
    ``chmod`` of a registry made read-only changes ctime, not the manifest)."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _primary(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _tail(path: Path, offset: int) -> str:
    """Checksum of the ``TAIL`` bytes before ``offset`` (what was read last time must still be there)."""
    if offset <= 0:
        return "0"
    with open(path, "rb") as fh:
        fh.seek(max(0, offset - TAIL))
        return format(zlib.crc32(fh.read(min(offset, TAIL))), "x")


class Index:
    """One SQLite connection per process (re-opened after a fork).

    ``path`` ``":memory:"``: an in-memory index over the files (worker mode, a registry not created
    yet). ``read_only``: never write the file; the rows live in an in-memory copy of it.
    """

    def __init__(self, root: Path, path: str | Path, read_only: bool = False) -> None:
        self.root = Path(root)
        self.path = str(path)
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.problems: list[tuple[str, str]] = []  # (path, what is wrong) met by the last sync or rebuild
        self.repairs: list[str] = []  # where the index disagreed with the files (and was brought back in line)

    # -- connection and transactions ---------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self._conn, self._pid = self._connect(), os.getpid()
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        if self.path == ":memory:":
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        elif self.read_only:
            conn = self._memory_copy()
        else:
            conn = self._retry(lambda: sqlite3.connect(os.fsencode(self.path), timeout=60.0, isolation_level=None,
                                                       check_same_thread=False))
            try:
                conn.execute("PRAGMA busy_timeout=60000")
                self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                conn.close()
                raise self._named(exc) from exc
        try:
            self._retry(lambda: self._drop_other_schema(conn))
            self._retry(lambda: conn.executescript(SCHEMA))
        except BaseException:
            conn.close()
            raise
        return conn

    def _memory_copy(self) -> sqlite3.Connection:
        """The index file copied into memory (opened read-only and immutable: no lock, no -wal/-shm
        files needed); a damaged or missing file gives an empty copy, filled from the files by sync."""
        mem = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        if not os.path.exists(self.path):
            return mem
        uri = "file:" + urllib.parse.quote(os.fsencode(os.path.abspath(self.path))) + "?mode=ro&immutable=1"
        try:
            src = sqlite3.connect(uri, uri=True, check_same_thread=False)
            try:
                src.execute("PRAGMA quick_check(1)")  # a damaged file must not seed the copy
                src.backup(mem)
            finally:
                src.close()
        except sqlite3.Error as exc:
            mem.close()
            self._repair(f"the index {self.path} cannot be read ({exc}); this read-only registry is served from its "
                         f"files (slower); `mmgrid registry reindex {self.root}` rebuilds the index where it is writable")
            mem = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        return mem

    @staticmethod
    def _drop_other_schema(conn: sqlite3.Connection) -> None:
        """Drop the tables of an index file written by another schema version. The index is a cache
        of the registry's files, so its rows are rebuilt by the next sync (``_sync`` sees the
        version); ``CREATE TABLE IF NOT EXISTS`` alone would keep the old tables' columns."""
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                 "AND name NOT LIKE 'sqlite_%'")]
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:  # not migrated meanwhile
                for table in tables:
                    conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def _named(self, exc: sqlite3.Error) -> Exception:
        """The named error of a SQLite failure (the index file, what happened, the fix)."""
        code = _primary(exc)
        msg = str(exc).lower()
        if code in CORRUPT_CODES or "malformed" in msg or "not a database" in msg:
            return CorruptIndexError(
                f"the registry index {self.path} is damaged ({exc}); it is only a cache of the registry's files: "
                f"rebuild it with `mmgrid registry reindex {self.root}`.")
        if code in READONLY_CODES or "readonly" in msg:
            return ReadOnlyRegistryError(
                f"the registry index {self.path} cannot be written ({exc}); the registry {self.root} is read-only "
                "here: read commands work as they are; write to a writable copy (`cp -r`) or remount it read-write.")
        if code in STORAGE_CODES or "disk" in msg or "i/o" in msg or "unable to open" in msg:
            err = RegistryStorageError(describe_os_error(exc, "updating the registry index", self.path))
            err.errno = errno.ENOSPC if code == sqlite3.SQLITE_FULL else None
            return err
        return exc

    def _retry(self, fn: Callable[[], T], tries: int = 50) -> T:
        delay = 0.01
        for attempt in range(tries):
            try:
                return fn()
            except sqlite3.Error as exc:
                msg = str(exc).lower()
                busy = "locked" in msg or "busy" in msg
                if busy and attempt < tries - 1:
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                if busy:
                    raise IndexLockedError(
                        f"the registry index stayed locked after {tries} tries ({exc}); another process holds "
                        "it for long, or the file system lacks POSIX locks — open workers with index=False."
                    ) from exc
                named = self._named(exc)
                if named is exc:
                    raise
                raise named from exc
        raise AssertionError("unreachable")

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one write transaction, retried while the database is locked."""
        conn = self.conn

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite may have rolled back itself (a full disk, a damaged file)
                raise
            conn.execute("COMMIT")
            return out

        return self._retry(attempt)

    def read(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        return self._retry(lambda: self.conn.execute(sql, tuple(args)).fetchall())

    # -- rows ------------------------------------------------------------------------
    @staticmethod
    def add_manifest(conn: sqlite3.Connection, m: Manifest, mstat: str | None = None) -> None:
        c = m.coords
        conn.execute(
            "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (m.id, c["paradigm"], c["domain"], c["period"], c.get("variant", "default"), m.kind, _method(m), m.seed,
             m.created, json.dumps(c, sort_keys=True), json.dumps(m.params, sort_keys=True), len(m.blobs), m.nbytes,
             mstat),
        )
        conn.execute("DELETE FROM coord_kv WHERE id=?", (m.id,))
        conn.executemany("INSERT INTO coord_kv VALUES (?,?,?)", [(m.id, k, v) for k, v in c.items() if k not in STD])
        conn.execute("DELETE FROM edges WHERE child=?", (m.id,))
        conn.executemany(
            "INSERT INTO edges VALUES (?,?,?,?,?,?)",
            [(m.id, i, p.id, p.role, m.method, json.dumps(m.params, sort_keys=True)) for i, p in enumerate(m.parents)],
        )

    @staticmethod
    def remove_checkpoint(conn: sqlite3.Connection, cid: str) -> None:
        conn.execute("DELETE FROM checkpoints WHERE id=?", (cid,))
        conn.execute("DELETE FROM coord_kv WHERE id=?", (cid,))
        conn.execute("DELETE FROM edges WHERE child=?", (cid,))
        conn.execute("DELETE FROM aliases WHERE id=?", (cid,))

    @staticmethod
    def add_record(conn: sqlite3.Connection, rec: Mapping[str, Any], src: str | None = None) -> None:
        extra = json.dumps(rec.get("extra") or {}, sort_keys=True)
        ci = rec.get("ci") or {}
        rows = [(rec["key"], name, rec.get("id"), rec.get("recipe_hash"), rec.get("recipe"), rec.get("split"),
                 rec.get("group"), float(v), *_bounds(ci.get(name)), extra, rec.get("created"), src)
                for name, v in rec["metrics"].items()]
        for row in rows:  # all or nothing: refuse a record before any of its rows is inserted
            bad = [x for x in row if x is not None and not isinstance(x, (str, int, float))]
            if bad:
                raise TypeError(f"values {bad!r} are not text or numbers")
        conn.executemany("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)

    @staticmethod
    def track_results_file(conn: sqlite3.Connection, path: Path) -> None:
        """Make sure sync watches a results file this process appends to (so its rows go if it goes)."""
        st = path.stat()
        conn.execute("INSERT OR IGNORE INTO sync_state VALUES (?,?)", (f"r:{path.name}", f"0:{st.st_ino}:0:0"))

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
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
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
            os.replace(self.path, temp_path(tmp, "index.sqlite.damaged"))

    def _clear_and_sync(self, conn: sqlite3.Connection) -> int:
        for table in ("checkpoints", "coord_kv", "edges", "aliases", "results", "sync_state", "meta"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
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

    def compare(self, fresh: "Index") -> list[str]:
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

    # -- queries ------------------------------------------------------------------
    def query_rows(self, filters: Mapping[str, Any]) -> list[tuple]:
        where, args = [], []
        for key, value in filters.items():
            if value is None:
                continue
            if key in CK_DIRECT:
                _clause(where, args, key, value)
            else:  # extra coords (lambda, alpha...): indexed key/value rows
                sub: list[str] = []
                _clause(sub, args, "value", value)
                where.append(f"id IN (SELECT id FROM coord_kv WHERE key = '{_safe_key(key)}' AND {sub[0]})")
        sql = f"SELECT {', '.join(CK_COLS)}, mstat FROM checkpoints"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._checked(sql + " ORDER BY created, id", args, lambda r: (r[0], r[-1]))

    def _checked(self, sql: str, args: list[Any], pair: Callable[[tuple], tuple[str | None, str | None]]
                 ) -> list[tuple]:
        """Rows of ``sql`` (its last column: the manifest stat identity), each checkpoint's manifest
        checked first (one ``stat`` per distinct checkpoint returned); rows whose manifest changed
        are read again from the files. The last column is dropped."""
        rows = self.read(sql, args)
        pairs = {pair(r) for r in rows}
        stale = self._stale((cid, ms) for cid, ms in pairs if cid is not None and ms is not None)
        if stale:
            self._refresh(stale)
            rows = self.read(sql, args)
        return [r[:-1] for r in rows]

    def result_rows(self, filters: Mapping[str, Any]) -> list[tuple]:
        direct = {"id": "r.id", "split": "r.split", "group": "r.grp", "metric": "r.metric",
                  "recipe_hash": "r.recipe_hash", "kind": "c.kind", "key": "r.key"}
        where, args = [], []
        for key, value in filters.items():
            if value is None:
                continue
            if key in direct:
                col = direct[key]
            elif key in STD or key == "seed":
                col = f"COALESCE(c.{key}, json_extract(r.extra, '$.{key}'))"
            else:
                col = f"json_extract(r.extra, '$.{_safe_key(key)}')"
            _clause(where, args, col, value)
        sql = (
            "SELECT r.id, r.recipe_hash, r.split, r.grp, r.metric, r.value, r.ci_low, r.ci_high, "
            + ", ".join(f"COALESCE(c.{k}, json_extract(r.extra, '$.{k}'))" for k in (*STD, "seed"))
            + ", c.kind, r.extra, r.recipe, r.created, r.key, c.mstat FROM results r LEFT JOIN checkpoints c ON c.id = r.id"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._checked(sql + " ORDER BY r.created, r.key, r.metric", args, lambda r: (r[0], r[-1]))


def _results_stamp(stamp: str | None) -> tuple[int, int | None, int | None, str | None]:
    """(offset read, inode, mtime_ns, tail checksum) of a results file's stamp; (0, None, ...) if none."""
    if not stamp:
        return 0, None, None, None
    offset, ino, mtime, tail = stamp.split(":")
    return int(offset), int(ino), int(mtime), tail


def _method(m: Manifest) -> str | None:
    """How it was made: ``params["method"]``, else a ``method`` coordinate (merges put it there)."""
    if m.method is not None:
        return m.method
    method = m.coords.get("method")
    return str(method) if method is not None else None


def _bounds(ci: Any) -> tuple[float | None, float | None]:
    """(low, high) of one metric's stored interval; (None, None) where the record has none."""
    if ci is None:
        return None, None
    lo, hi = ci
    return float(lo), float(hi)


def _safe_key(key: str) -> str:
    if not key.replace("_", "a").isalnum():
        raise RegistryError(f"filter {key!r} is not an identifier; filter on coords such as paradigm=, domain=, lambda=.")
    return key


def _clause(where: list[str], args: list[Any], col: str, value: Any) -> None:
    if isinstance(value, (list, tuple, set, frozenset)):
        values = list(value)
        where.append(f"{col} IN ({', '.join('?' * len(values))})" if values else "0")
        args.extend(values)
    else:
        where.append(f"{col} = ?")
        args.append(value)
