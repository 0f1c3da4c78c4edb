"""The public registry API: ``from mmgrid import Registry``.

A registry root holds content-addressed blobs (one safetensors file per tensor, see
``store.py``), one JSON manifest per checkpoint (the source of truth, ``manifest.py``),
append-only results files (``results.py``), alias files, and ``index.sqlite``, a cache
of all of these (``index.py``) that ``reindex()`` rebuilds.

Two modes:

* ``Registry.open(root)`` (driver, default): keeps the SQLite index current.
* ``Registry.open(root, index=False)`` (worker): never opens ``index.sqlite`` (safe on file
  systems without reliable SQLite locking); queries go through an in-memory index built
  from the files. The driver calls :meth:`Registry.sync` to index what workers wrote.

Writes go through ``guard.py`` (read-only, first write, writers' lock, OS errors);
evaluations live in ``evals.py``.
"""

from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mmgrid.errors import RegistryError
import mmgrid.registry.aliases as alias_files
import mmgrid.registry.hf as hf
import mmgrid.registry.maintenance as maintenance
import mmgrid.registry.names as names
import mmgrid.registry.writing as writing
from mmgrid.registry.fsio import pause_point
from mmgrid.registry.errors import (AmbiguousCheckpointError, InvalidNameError, CorruptIndexError, RegistryStorageError, RegistryWarning,
                                    UnknownCheckpointError)
from mmgrid.registry.evals import Evaluations
from mmgrid.registry.guard import check_root, read_only_reason, writes
from mmgrid.registry.index import Index
from mmgrid.registry.indexsync import manifest_stat
from mmgrid.registry.locks import WritersLock
from mmgrid.registry.maintenance import GcReport, VerifyReport
from mmgrid.registry.manifest import Manifest, Parent, code_version, field_type_problems, read_manifest
from mmgrid.registry.results import ResultsLog
from mmgrid.fileio.atomic import atomic_write
from mmgrid.fileio.safetensors import torch_dtype
from mmgrid.registry.store import BlobStore
from mmgrid.registry.tensors import LazyTensors, iter_state

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx
    import pandas as pd
    import torch

WORKER_ENV = "MMGRID_REGISTRY_WORKER"  # "1": Registry.open defaults to worker mode (no SQLite)


class Registry(Evaluations):
    """A checkpoint-grid registry rooted at one folder (see the module docstring)."""

    make_id = staticmethod(names.make_id)

    def __init__(self, root: str | Path, index: bool = True, durable: bool = True,
                 read_only: bool | None = None) -> None:
        self.root = Path(root)
        self.indexed = index
        self.durable = durable
        self.read_only_reason = (read_only_reason(self.root) if read_only is None
                                 else "opened with read_only=True" if read_only else None)
        self.store = BlobStore(self.root, durable=durable)
        self._log = ResultsLog(self.root, durable=durable)
        self._writers = WritersLock(self.root)
        self._created = (self.root / "manifests").is_dir()
        # a registry not created yet has an in-memory index until its first write (opening writes nothing)
        self._index = Index(self.root, self.root / "index.sqlite" if index and self._created else ":memory:",
                            read_only=self.read_only_reason is not None)
        self._manifests: dict[str, Manifest] = {}
        self._rec = threading.local()  # this thread's open recording() block: .pending records, .new_files
        self._made: Path | None = None  # the folder the first write created (see _undo_created)
        self._index_broken: CorruptIndexError | None = None  # the index file is damaged (until reindex)

    @classmethod
    def open(cls, root: str | Path, index: bool | None = None, durable: bool = True,
             read_only: bool | None = None) -> "Registry":
        """Open the registry at ``root``; nothing is created or written until the first write.

        Args:
            root: the registry folder (made, with its sub-folders, by the first write).
            index: False for worker processes that must never touch the SQLite index.
                None (default): worker mode when the environment has
                ``MMGRID_REGISTRY_WORKER=1`` (set by mmgrid's Ray executor), else True.
            durable: fsync every write (default). False only for throwaway registries
                (benchmarks, scratch), where a power loss may lose recent writes.
            read_only: True: never write (reads only; writes raise ReadOnlyRegistryError).
                None (default): read-only when the folder cannot be written (a read-only
                mount, no permission); its index is then read into memory, never written.
        """
        root = check_root(Path(root))
        if index is None:
            index = os.environ.get(WORKER_ENV) != "1"
        reg = cls(root, index=index, durable=durable, read_only=read_only)
        if index:
            try:
                reg.sync()  # pick up what workers or killed writers left unindexed
            except CorruptIndexError as exc:
                # open anyway: reading manifests (get, load, lineage) and reindex work; queries and writes
                # raise this error, which names the index file and the fix
                reg._index_broken = exc
            except RegistryStorageError as exc:  # a full disk: the index cannot be brought up to date in place
                warnings.warn(f"{exc} Reading {root} from an in-memory index meanwhile.", RegistryWarning, stacklevel=2)
                reg._index.close()
                reg._index = Index(root, root / "index.sqlite", read_only=True)
                reg.sync()
        return reg

    def close(self) -> None:
        self._index.close()
        self._log.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Registry({str(self.root)!r}, index={self.indexed})"

    # -- index maintenance ------------------------------------------------------
    def sync(self) -> int:
        """Index manifests, aliases and results written by other processes (incremental)."""
        n = self._index.sync()
        self._index_broken = None
        return n

    @writes("reindex")
    def reindex(self) -> int:
        """Rebuild the index from the files alone, whatever state the index file is in (a damaged
        one is replaced); returns the number of rows indexed.

        Unreadable manifests and aliases are skipped with a :class:`RegistryWarning` and
        listed in :attr:`index_problems` (``mmgrid registry reindex`` then exits 1)."""
        n = self._index.rebuild()
        self._index_broken = None
        return n

    @property
    def index_repairs(self) -> list[str]:
        """Where the index disagreed with the files since this registry was opened (a results file
        gone, an index built for another folder, a manifest changed): each was brought in line."""
        return list(self._index.repairs)

    @property
    def index_problems(self) -> list[tuple[str, str]]:
        """(path, what is wrong) of every file the last sync or reindex skipped."""
        return list(self._index.problems)

    def _reader(self) -> Index:
        if self._index_broken is not None:
            raise self._index_broken
        if not self._created and self.indexed and (self.root / "manifests").is_dir():
            # created by another process since this one opened it: read its index (creating nothing)
            self._created = True
            self._index.close()
            self._index = Index(self.root, self.root / "index.sqlite", read_only=self.read_only)
            self.sync()
        if not self.indexed:
            self._index.sync()  # workers: an in-memory index over the files
        return self._index

    # -- identity -----------------------------------------------------------------
    def manifest_path(self, cid: str) -> Path:
        return self.root / "manifests" / cid[:2] / f"{cid}.json"

    def has(self, cid: str) -> bool:
        """Is a complete checkpoint with this id stored? (its manifest is written last)."""
        return isinstance(cid, str) and names.is_hex(cid) and self.manifest_path(cid).is_file()

    # -- writing --------------------------------------------------------------------
    @writes("put")
    def put(
        self,
        state_or_path: "Mapping[str, torch.Tensor] | str | Path",
        coords: Mapping[str, Any],
        kind: str,
        parents: Iterable[Any] | None = None,
        params: Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        meta: Mapping[str, Any] | None = None,
        seed: int | None = None,
        config_hash: str | None = None,
        data_fingerprint: str | None = None,
    ) -> str:
        """Store a checkpoint; return its id. The same identity returns the same id and stores nothing.

        Args:
            state_or_path: a flat state dict, or a ``.safetensors`` file or a folder of them.
            coords: paradigm, domain, period (+ variant, default "default", + any extra keys).
            kind: base, trained, merged or imported.
            parents: ``[(id, role), ...]``; roles previous_stage, init, merge_input, merge_base.
            params: how it was made (``{"method": ..., ...}``); part of the identity.
            files: small assets (config.json, tokenizer.json...) name -> bytes.
            meta: JSON-able extras (item codes, sizes, added_rows); not part of the identity.
            seed, config_hash: part of the identity.
            data_fingerprint: provenance, recorded in the manifest.

        Raises:
            InvalidNameError, UnsafeFormatError, UnknownCheckpointError (a parent is unknown),
            NonFiniteTensorError (NaN/Inf), IdentityConflictError (the identity is stored with
            other tensor names, shapes or dtypes). Nothing is stored when any is raised.
        """
        bad = field_type_problems(seed=seed, config_hash=config_hash, data_fingerprint=data_fingerprint)
        if bad:
            raise InvalidNameError(f"Registry.put: {'; '.join(bad)}; pass the seed as an int and the hashes as strings.")
        coords = names.normalize_coords(coords)
        plist = names.normalize_parents(self.resolve_parents(parents))
        cid = names.make_id(coords, kind, plist, params, config_hash, seed)
        if self.has(cid):
            writing.check_same_tensors(self.get(cid), state_or_path)
            return cid
        for pid, _ in plist:
            if not self.has(pid):
                raise UnknownCheckpointError(f"parent {pid} of the checkpoint being put is not in {self.root}; put the parent first.")
        # fail before writing anything
        params_j, meta_j = writing.jsonable(params, "params"), writing.jsonable(meta, "meta")
        files = writing.check_files(files)
        with self.store.batch():
            file_refs = writing.store_files(self.store, files)
            blobs = writing.store_tensors(self.store, iter_state(state_or_path))
        m = Manifest(
            id=cid, coords=coords, kind=kind, parents=[Parent(*p) for p in plist], params=params_j,
            meta=meta_j, files=file_refs, blobs=blobs, seed=seed, config_hash=config_hash,
            data_fingerprint=data_fingerprint, code_version=code_version(),
            created=names.now_iso(),
        )
        self.commit_manifest(m)
        return cid

    def resolve_parents(self, parents: Iterable[Any] | None) -> list[tuple[str, str]]:
        """``[(full id, role), ...]`` of parents named by id, id prefix or alias (``(ref, role)`` pairs or
        ``{"id", "role"}`` mappings); identities always use full ids."""
        out = []
        for p in parents or ():
            pid, role = (p["id"], p["role"]) if isinstance(p, Mapping) else tuple(p)
            if isinstance(pid, str) and not (names.is_hex(pid) and len(pid) == names.ID_LEN):
                pid = self.resolve(pid)
            out.append((pid, role))
        return out

    def commit_manifest(self, m: Manifest) -> None:
        """Store a checkpoint's manifest, the last write of a put (its blobs and files are stored already):
        until its rename the checkpoint does not exist. Where another writer stored the same id first, its
        manifest is kept and indexed."""
        m.check_paths()
        path = self.manifest_path(m.id)
        if not atomic_write(path, m.dumps().encode(), self.store.tmp, self.durable,
                            before_rename=lambda: pause_point("manifest_tmp_written"),
                            exclusive=True):
            # another writer put the same identity first: its manifest is the checkpoint, and the index must say
            # what the file says (else a rebuilt index would differ from the live one)
            m = read_manifest(path)
        self._manifests[m.id] = m
        if self.indexed:
            mstat = manifest_stat(os.stat(path))
            self._index.write(lambda conn: Index.add_manifest(conn, m, mstat))

    # -- reading ---------------------------------------------------------------------
    def resolve(self, ref: "str | Mapping[str, Any] | Manifest") -> str:
        """Id of an id, id prefix (>= 6 hex digits), alias, coords mapping or Manifest."""
        if isinstance(ref, Manifest):
            return ref.id
        if isinstance(ref, Mapping):
            return self._by_coords(ref)
        if not isinstance(ref, str) or not ref:
            raise UnknownCheckpointError(f"{ref!r} is not a checkpoint id, alias or coords mapping.")
        if self.has(ref):
            return ref
        target = alias_files.read_alias(self.root, ref)
        if target is not None:
            if not self.has(target):
                raise UnknownCheckpointError(
                    f"alias {ref!r} points at checkpoint {target}, which is not in {self.root} (its manifest was "
                    f"removed); re-point it with `mmgrid registry alias {self.root} {ref} ID`."
                )
            return target
        if names.is_hex(ref) and 6 <= len(ref) < names.ID_LEN:
            sub = self.root / "manifests" / ref[:2]
            hits = sorted(p.stem for p in sub.glob(f"{ref}*.json")) if sub.is_dir() else []
            if len(hits) == 1:
                return hits[0]
            if hits:
                raise AmbiguousCheckpointError(f"id prefix {ref!r} matches {len(hits)} checkpoints ({', '.join(hits[:10])}); give more digits.")
        raise UnknownCheckpointError(
            f"no checkpoint {ref!r} in registry {self.root} (not an id, id prefix or alias); "
            f"list them with `mmgrid query {self.root}` or reg.query()."
        )

    def _by_coords(self, coords: Mapping[str, Any]) -> str:
        filters = dict(coords)
        filters.setdefault("variant", "default")
        rows = self._reader().query_rows(filters)
        if not rows and self.indexed and self.sync():  # written by a worker since the last sync?
            rows = self._index.query_rows(filters)
        if len(rows) == 1:
            return rows[0][0]
        if not rows:
            raise UnknownCheckpointError(f"no checkpoint has coords {filters} in {self.root}; check them with reg.query().")
        cands = "; ".join(f"{r[0]} kind={r[5]} seed={r[7]} created={r[8]}" for r in rows[:20])
        raise AmbiguousCheckpointError(f"coords {filters} match {len(rows)} checkpoints: {cands}. Add kind= or an extra coord, or use an id.")

    def get(self, ref: "str | Mapping[str, Any] | Manifest") -> Manifest:
        """The manifest of a checkpoint given by id, id prefix, alias or coords."""
        cid = self.resolve(ref)
        m = self._manifests.get(cid)
        if m is None:
            path = self.manifest_path(cid)
            try:
                m = read_manifest(path)
            except FileNotFoundError:
                raise UnknownCheckpointError(f"checkpoint {cid} vanished from {self.root} (removed by gc?).") from None
            if m.id != cid:
                raise RegistryError(f"manifest {path} claims id {m.id}; the file was renamed or edited. Run `mmgrid registry verify`.")
            self._manifests[cid] = m
        return m

    def load(self, ref: Any, dtype: "torch.dtype | None" = None, device: str = "cpu") -> "dict[str, torch.Tensor]":
        """All tensors of a checkpoint, read blob by blob; ``dtype`` casts floating tensors only."""
        lazy = self.open_tensors(ref, dtype=dtype, device=device)
        with ThreadPoolExecutor(max_workers=self.store.workers) as pool:  # reads and sha256 release the GIL
            tensors = list(pool.map(lazy.__getitem__, list(lazy)))
        return dict(zip(lazy, tensors))

    def open_tensors(self, ref: Any, dtype: "torch.dtype | None" = None, device: str = "cpu") -> LazyTensors:
        """A mapping name -> tensor that reads each tensor only when it is looked up (streaming)."""
        m = self.get(ref)
        return LazyTensors(self.store, m, dtype=dtype, device=device)

    def tensor_names(self, ref: Any) -> list[str]:
        return list(self.get(ref).blobs)

    def tensor_info(self, ref: Any) -> "dict[str, tuple[tuple[int, ...], torch.dtype]]":
        """Shape and dtype of every tensor, from the manifest (nothing is loaded)."""
        return {k: (b.shape, torch_dtype(b.dtype)) for k, b in self.get(ref).blobs.items()}

    def file(self, ref: Any, name: str) -> bytes:
        m = self.get(ref)
        if name not in m.files:
            raise UnknownCheckpointError(f"checkpoint {m.id} has no file {name!r}; it has: {', '.join(sorted(m.files)) or 'none'}.")
        return self.store.read_file(m.files[name], where=f"file {name} of {m.id}")

    # -- queries ----------------------------------------------------------------------
    def query(self, **filters: Any) -> "pd.DataFrame":
        """One row per checkpoint matching all filters (paradigm=, domain=, period=, kind=,
        variant=, method=, or any extra coord such as lambda=; a list value means any of)."""
        from mmgrid.registry.frames import checkpoints_frame  # lazy: pandas (~0.5-1 s) stays out of `import mmgrid.registry`

        return checkpoints_frame(self._reader().query_rows(filters))

    def lineage(self, ref: Any) -> "nx.DiGraph":
        """The checkpoint and all its ancestors; edges parent -> child with role, method, params."""
        from mmgrid.registry.lineage import build  # lazy: networkx (~0.3 s) stays out of `import mmgrid.registry`

        return build(self, self.resolve(ref))

    # -- aliases ------------------------------------------------------------------------
    @writes("alias")
    def alias(self, name: str, ref: Any) -> str:
        """Point ``name`` at a checkpoint (moving it if it existed); returns the id."""
        names.check_alias(name)
        cid = self.resolve(ref)
        created = alias_files.write_alias(self.root, name, cid, self.store.tmp, self.durable)
        if self.indexed:
            self._index.write(lambda c: c.execute("INSERT OR REPLACE INTO aliases VALUES (?,?,?)", (name, cid, created)))
        return cid

    def aliases(self) -> dict[str, str]:
        """Name -> id of every valid alias (broken alias files are listed by ``verify``)."""
        return {name: cid for name, cid, _ in alias_files.scan(self.root)[0]}

    # -- Hugging Face, maintenance --------------------------------------------------------
    def export_hf(self, ref: Any, out_dir: str | Path) -> Path:
        """Write a plain Hugging Face folder (model.safetensors + config/tokenizer files)."""
        return hf.export_hf(self, ref, Path(out_dir))

    @writes("import-hf")
    def import_hf(self, path: str | Path, coords: Mapping[str, Any], **kw: Any) -> str:
        """Bring in a Hugging Face folder trained elsewhere (see :func:`mmgrid.registry.hf.import_hf`)."""
        return hf.import_hf(self, Path(path), coords, **kw)

    def verify(self) -> VerifyReport:
        """Re-hash every blob and file; report missing or corrupt ones, bad manifests and
        aliases, and temporary files left by killed writers."""
        return maintenance.verify(self)

    def gc(self, keep: Iterable[Any] | None = None, dry_run: bool = False, grace_s: float = 3600.0) -> GcReport:
        """Remove unreachable checkpoints, unreferenced blobs and stale temporary files
        (rule: :func:`mmgrid.registry.maintenance.gc`). It waits for writes in flight (puts,
        recorded evaluations) and writes wait for it: whatever ``grace_s``, it never races a writer."""
        if dry_run or not self._created:  # nothing to remove from a registry not created yet
            return maintenance.gc(self, keep=keep, dry_run=dry_run, grace_s=grace_s)
        self.require_writable("gc")
        if self._index_broken is not None:
            raise self._index_broken
        with self._guard("gc"), self._writers.exclusive():
            return maintenance.gc(self, keep=keep, dry_run=dry_run, grace_s=grace_s)

    def iter_manifest_paths(self) -> list[Path]:
        return sorted((self.root / "manifests").glob("*/*.json"))

    def forget(self, cid: str) -> None:
        """Drop ``cid``'s manifest from this handle's cache: the next read re-reads its file."""
        self._manifests.pop(cid, None)

    def remove_checkpoints(self, cids: Iterable[str]) -> None:
        """Delete the manifests of ``cids`` and drop them from the cache and the index (``gc``'s removal of
        unreachable checkpoints; their blobs are ``gc``'s to remove)."""
        cids = list(cids)
        for cid in cids:
            self.manifest_path(cid).unlink(missing_ok=True)
            self.forget(cid)
        if self.indexed:
            self._index.write(lambda conn: [Index.remove_checkpoint(conn, c) for c in cids])

    @property
    def index_broken(self) -> CorruptIndexError | None:
        """The error of a damaged index file (None while the index is sound); ``reindex`` repairs it."""
        return self._index_broken

    def index_differences(self, fresh: Index) -> list[str]:
        """What this registry's index says differently from ``fresh``, an index built from the files."""
        return self._reader().compare(fresh)

