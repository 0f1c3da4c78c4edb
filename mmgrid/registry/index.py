"""The SQLite index: a rebuildable cache of manifests, aliases and results files.

WAL mode lets readers run while one process writes; every write transaction starts with
``BEGIN IMMEDIATE`` (take the write lock up front, so two writers never deadlock on a
lock upgrade) under a long ``busy_timeout``, and is retried on "database is locked".
:meth:`Index.sync` picks up files written by other processes (or by workers that never
touch SQLite) incrementally: a manifest folder is listed again only when its mtime moved,
a results file is read only past the offset already ingested.

The index is checked against the files it was built from (``indexsync.py``), so it never serves
what the files no longer say; a damaged index file is :class:`CorruptIndexError`.

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
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from mmgrid.errors import RegistryError, describe_os_error
from mmgrid.registry.errors import CorruptIndexError, IndexLockedError, ReadOnlyRegistryError, RegistryStorageError
from mmgrid.registry.indexsync import IndexSync
from mmgrid.registry.manifest import Manifest

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
CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
STORAGE_CODES = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN)
READONLY_CODES = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM)


def _primary(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


class Index(IndexSync):
    """One SQLite connection per process (re-opened after a fork).

    ``path`` ``":memory:"``: an in-memory index over the files (worker mode, a registry not created
    yet). ``read_only``: never write the file; the rows live in an in-memory copy of it.
    """

    schema_version = SCHEMA_VERSION

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

    # -- queries ------------------------------------------------------------------
    def query_rows(self, filters: Mapping[str, Any]) -> list[tuple]:
        where: list[str] = []
        args: list[Any] = []
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
        where: list[str] = []
        args: list[Any] = []
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
