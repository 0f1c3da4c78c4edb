"""The SQLite index: a rebuildable cache of manifests, aliases and results files.

WAL mode lets readers run while one process writes; every write transaction starts with
``BEGIN IMMEDIATE`` (take the write lock up front, so two writers never deadlock on a
lock upgrade) under a long ``busy_timeout``, and is retried on "database is locked".
:meth:`Index.sync` picks up files written by other processes (or by workers that never
touch SQLite) incrementally: a manifest folder is listed again only when its mtime moved,
a results file is read only past the offset already ingested.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from mmgrid.errors import RegistryError
import mmgrid.registry.aliases as alias_files
import mmgrid.registry.results as results_io
from mmgrid.registry.errors import IndexLockedError, RegistryWarning
from mmgrid.registry.manifest import Manifest, read_manifest

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints(
  id TEXT PRIMARY KEY, paradigm TEXT NOT NULL, domain TEXT NOT NULL, period TEXT NOT NULL,
  variant TEXT NOT NULL, kind TEXT NOT NULL, method TEXT, seed INTEGER, created TEXT, coords TEXT, params TEXT,
  n_tensors INTEGER, nbytes INTEGER);
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
  split TEXT, grp TEXT, value REAL, ci_low REAL, ci_high REAL, extra TEXT, created TEXT, PRIMARY KEY(key, metric));
CREATE INDEX IF NOT EXISTS res_id ON results(id);
CREATE INDEX IF NOT EXISTS res_metric ON results(metric, split, grp);
CREATE TABLE IF NOT EXISTS sync_state(path TEXT PRIMARY KEY, stamp TEXT);
"""
SCHEMA_VERSION = 4  # bump when the schema changes: older index files are rebuilt from the files
CK_COLS = ("id", "paradigm", "domain", "period", "variant", "kind", "method", "seed", "created", "n_tensors", "nbytes",
           "coords", "params")
CK_DIRECT = CK_COLS[:8]  # filters on a column of their own (the rest: coord_kv rows)
STD = ("paradigm", "domain", "period", "variant")
RECENT_NS = 2_000_000_000  # re-list folders touched in the last 2 s (coarse mtimes on network file systems)


class Index:
    """One SQLite connection per process (re-opened after a fork)."""

    def __init__(self, root: Path, path: str | Path) -> None:
        self.root = Path(root)
        self.path = str(path)
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.problems: list[tuple[str, str]] = []  # (path, what is wrong) met by the last sync or rebuild

    # -- connection and transactions ---------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=60000")
            if self.path != ":memory:":
                self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                conn.execute("PRAGMA synchronous=NORMAL")
            self._retry(lambda: self._drop_other_schema(conn))
            self._retry(lambda: conn.executescript(SCHEMA))
            self._conn, self._pid = conn, os.getpid()
        return self._conn

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

    @staticmethod
    def _retry(fn: Callable[[], T], tries: int = 50) -> T:
        delay = 0.01
        for attempt in range(tries):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if "locked" not in msg and "busy" not in msg or attempt == tries - 1:
                    if "locked" in msg or "busy" in msg:
                        raise IndexLockedError(
                            f"the registry index stayed locked after {tries} tries ({exc}); another process holds "
                            "it for long, or the file system lacks POSIX locks — open workers with index=False."
                        ) from exc
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one write transaction, retried while the database is locked."""
        conn = self.conn

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return out

        return self._retry(attempt)

    def read(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        return self._retry(lambda: self.conn.execute(sql, tuple(args)).fetchall())

    # -- rows ------------------------------------------------------------------------
    @staticmethod
    def add_manifest(conn: sqlite3.Connection, m: Manifest) -> None:
        c = m.coords
        conn.execute(
            "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (m.id, c["paradigm"], c["domain"], c["period"], c.get("variant", "default"), m.kind, _method(m), m.seed,
             m.created, json.dumps(c, sort_keys=True), json.dumps(m.params, sort_keys=True), len(m.blobs), m.nbytes),
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
    def add_record(conn: sqlite3.Connection, rec: Mapping[str, Any]) -> None:
        extra = json.dumps(rec.get("extra") or {}, sort_keys=True)
        ci = rec.get("ci") or {}
        rows = [(rec["key"], name, rec.get("id"), rec.get("recipe_hash"), rec.get("recipe"), rec.get("split"),
                 rec.get("group"), float(v), *_bounds(ci.get(name)), extra, rec.get("created"))
                for name, v in rec["metrics"].items()]
        for row in rows:  # all or nothing: refuse a record before any of its rows is inserted
            bad = [x for x in row if x is not None and not isinstance(x, (str, int, float))]
            if bad:
                raise TypeError(f"values {bad!r} are not text or numbers")
        conn.executemany("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)

    # -- sync from files ---------------------------------------------------------------
    def _stamps(self, conn: sqlite3.Connection) -> dict[str, str]:
        return dict(conn.execute("SELECT path, stamp FROM sync_state").fetchall())

    def sync(self) -> int:
        """Index what other processes wrote since the last sync; returns the number of changes.

        A manifest or alias file that cannot be read is skipped (it must not block the
        index), listed in :attr:`problems` and announced with a :class:`RegistryWarning`.
        """
        self.problems = []
        n = self.write(self._sync)
        self._warn()
        return n

    def _skip(self, path: str, problem: str) -> None:
        if (path, problem) not in self.problems:
            self.problems.append((path, problem))

    def _warn(self) -> None:
        for path, problem in self.problems:
            warnings.warn(f"registry index skipped {path}: {problem}", RegistryWarning, stacklevel=3)

    def _sync(self, conn: sqlite3.Connection) -> int:
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            return self._clear_and_sync(conn)  # an index file from an older mmgrid
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
                try:
                    m = read_manifest(path)
                    if m.id != cid:
                        raise RegistryError(f"manifest {path} claims id {m.id}; the file was renamed or edited.")
                    self.add_manifest(conn, m)
                except (RegistryError, OSError) as exc:
                    self._skip(str(path), str(exc))  # one bad file must not block the index; verify() lists it too
                    continue
                n += 1
            for cid in indexed - on_disk:
                self.remove_checkpoint(conn, cid)
                n += 1
            conn.execute("INSERT OR REPLACE INTO sync_state VALUES (?,?)", (f"m:{name}", str(mtime)))
        return n

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

    def _sync_results(self, conn: sqlite3.Connection, stamps: dict[str, str]) -> int:
        n = 0
        for path in results_io.iter_files(self.root):
            key = f"r:{path.name}"
            offset = int(stamps.get(key, "0"))
            if path.stat().st_size <= offset:
                continue
            records, new_offset = results_io.read_lines(path, offset)
            for rec in records:
                try:
                    self.add_record(conn, rec)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    self._skip(str(path), f"record {rec.get('key')!r} is malformed ({exc!r}); the file was edited: "
                                          "restore it from a backup or delete that line.")
                    continue
                n += 1
            conn.execute("INSERT OR REPLACE INTO sync_state VALUES (?,?)", (key, str(new_offset)))
        return n

    def rebuild(self) -> int:
        """Forget everything and index all files again (``mmgrid registry reindex``); files
        that cannot be read are skipped and listed in :attr:`problems` (see :meth:`sync`)."""
        self.problems = []
        n = self.write(self._clear_and_sync)
        self._warn()
        return n

    def _clear_and_sync(self, conn: sqlite3.Connection) -> int:
        for table in ("checkpoints", "coord_kv", "edges", "aliases", "results", "sync_state"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        return self._sync(conn)

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
        sql = f"SELECT {', '.join(CK_COLS)} FROM checkpoints"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self.read(sql + " ORDER BY created, id", args)

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
            + ", c.kind, r.extra, r.recipe, r.created, r.key FROM results r LEFT JOIN checkpoints c ON c.id = r.id"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self.read(sql + " ORDER BY r.created, r.key, r.metric", args)


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
