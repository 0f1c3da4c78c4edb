"""The public registry API: ``from mmgrid import Registry``.

A registry root holds content-addressed blobs (one safetensors file per tensor, see
``store.py``), one JSON manifest per checkpoint (the source of truth, ``manifest.py``),
append-only results files (``results.py``), alias files, and ``index.sqlite``, a cache
of all of these (``index.py``) that ``reindex()`` rebuilds.

Two modes:

* ``Registry.open(root)`` (driver, default): keeps the SQLite index current.
* ``Registry.open(root, index=False)`` (worker): writes blobs, manifests, aliases and
  results files only and never opens ``index.sqlite``, so workers on a shared file system
  without reliable SQLite locking are safe. Its queries go through an in-memory index
  built from the files. The driver calls :meth:`Registry.sync` to index what workers wrote.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mmgrid.errors import RegistryError
import mmgrid.registry.aliases as alias_files
import mmgrid.registry.hf as hf
import mmgrid.registry.maintenance as maintenance
import mmgrid.registry.names as names
import mmgrid.registry.peruser as peruser
import mmgrid.registry.writing as writing
from mmgrid.registry.errors import AmbiguousCheckpointError, UnknownCheckpointError
from mmgrid.registry.index import Index
from mmgrid.registry.maintenance import GcReport, VerifyReport
from mmgrid.registry.manifest import Manifest, Parent, code_version, read_manifest
from mmgrid.registry.results import ResultsLog, make_record
from mmgrid.registry.fsio import atomic_write
from mmgrid.registry.store import BlobStore
from mmgrid.registry.tensors import LazyTensors, iter_state, torch_dtype

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx
    import pandas as pd
    import torch

WORKER_ENV = "MMGRID_REGISTRY_WORKER"  # "1": Registry.open defaults to worker mode (no SQLite)


class Registry:
    """A checkpoint-grid registry rooted at one folder (see the module docstring)."""

    make_id = staticmethod(names.make_id)

    def __init__(self, root: str | Path, index: bool = True, durable: bool = True) -> None:
        self.root = Path(root)
        self.indexed = index
        self.durable = durable
        self.store = BlobStore(self.root, durable=durable)
        self._log = ResultsLog(self.root, durable=durable)
        self._index = Index(self.root, self.root / "index.sqlite" if index else ":memory:")
        self._manifests: dict[str, Manifest] = {}

    @classmethod
    def open(cls, root: str | Path, index: bool | None = None, durable: bool = True) -> "Registry":
        """Open (creating if missing) the registry at ``root``.

        Args:
            root: the registry folder.
            index: False for worker processes that must never touch the SQLite index.
                None (default): worker mode when the environment has
                ``MMGRID_REGISTRY_WORKER=1`` (set by mmgrid's Ray executor), else True.
            durable: fsync every write (default). False only for throwaway registries
                (benchmarks, scratch), where a power loss may lose recent writes.
        """
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise RegistryError(f"registry root {root} is a file; give a folder (it is created if missing).")
        try:
            for sub in ("blobs", "files", "manifests", "aliases", "results", "tmp"):  # peruser/: on first use
                (root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RegistryError(f"cannot create the registry folders under {root} ({exc}); give a folder you can write to.") from exc
        if index is None:
            index = os.environ.get(WORKER_ENV) != "1"
        reg = cls(root, index=index, durable=durable)
        if index:
            reg.sync()  # pick up what workers or killed writers left unindexed
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
        return self._index.sync()

    def reindex(self) -> int:
        """Rebuild the index from the files alone; returns the number of rows indexed.

        Unreadable manifests and aliases are skipped with a :class:`RegistryWarning` and
        listed in :attr:`index_problems` (``mmgrid registry reindex`` then exits 1)."""
        return self._index.rebuild()

    @property
    def index_problems(self) -> list[tuple[str, str]]:
        """(path, what is wrong) of every file the last sync or reindex skipped."""
        return list(self._index.problems)

    def _reader(self) -> Index:
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
        coords = names.normalize_coords(coords)
        plist = names.normalize_parents(self._parent_ids(parents))
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
        self._commit(m)
        return cid

    def _parent_ids(self, parents: Iterable[Any] | None) -> list[tuple[str, str]]:
        """Let callers name parents by alias or id prefix too; identities always use full ids."""
        out = []
        for p in parents or ():
            pid, role = (p["id"], p["role"]) if isinstance(p, Mapping) else tuple(p)
            if isinstance(pid, str) and not (names.is_hex(pid) and len(pid) == names.ID_LEN):
                pid = self.resolve(pid)
            out.append((pid, role))
        return out

    def _commit(self, m: Manifest) -> None:
        """Write the manifest last: until its rename the checkpoint does not exist."""
        m.check_paths()
        atomic_write(self.manifest_path(m.id), m.dumps().encode(), self.store.tmp, self.durable, pause="manifest_tmp_written")
        self._manifests[m.id] = m
        if self.indexed:
            self._index.write(lambda conn: Index.add_manifest(conn, m))

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

    # -- evaluations -------------------------------------------------------------------
    def record_eval(
        self,
        ref: Any,
        split: str,
        group: str,
        metrics: Mapping[str, float],
        recipe: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        ci: Mapping[str, Any] | None = None,
    ) -> str:
        """Record metrics of a checkpoint (or of a merge ``recipe`` never stored, with ref=None).

        ``ci``: ``{metric: [low, high]}`` intervals; ``extra["per_user"]``: the path returned by
        :meth:`put_per_user` (checked to be one).

        Returns:
            The record's key (one line in this process's results file, one row per metric).
        """
        cid = self.resolve(ref) if ref is not None else None
        if extra and "per_user" in extra:
            peruser.resolve(self.root, extra["per_user"])
        rec = make_record(cid, split, group, metrics, recipe, extra, ci)
        self._log.append(rec)
        if self.indexed:
            self._index.write(lambda conn: Index.add_record(conn, rec))
        return rec["key"]

    def put_per_user(self, users: Any, active: Any, metrics: Mapping[str, Any]) -> str:
        """Store one evaluation's per-user values (``peruser.py``); returns the path to put in ``extra.per_user``."""
        return peruser.write(self.root, self.store.tmp, peruser.to_parquet(*peruser.check_columns(users, active, metrics)),
                             self.durable)

    def per_user(self, row_or_key: Any) -> "pd.DataFrame":
        """The per-user values behind one result row (a ``results()`` row or its ``key``): columns user_idx,
        active and one per metric, the row's group only. Raises RegistryError (no per-user file) and the
        errors of ``peruser.read`` (UnsafePathError, MissingBlobError, CorruptBlobError)."""
        key = row_or_key if isinstance(row_or_key, str) else row_or_key["key"]
        return peruser.of_record(self.root, self._reader().result_rows({"key": key}), key)

    def results(self, **filters: Any) -> "pd.DataFrame":
        """Evaluation rows (id or recipe_hash, split, group, metric, value, ci_low, ci_high, coords, seed,
        extra keys); see :func:`mmgrid.registry.frames.results_frame`."""
        from mmgrid.registry.frames import results_frame  # lazy: pandas (~0.5-1 s)

        return results_frame(self._reader().result_rows(filters))

    def grid(self, paradigm: str, variant: str = "default", value: str = "id", split: str | None = None,
             group: str | None = None, kind: str | list[str] | None = None, seed: int | None = None) -> "pd.DataFrame":
        """A domain x period table of ids (``value="id"``) or of one metric's values: of one training
        ``seed``'s replicate if given, else ids of the lowest seed and values averaged over the seeds;
        ``table.attrs["shows"]`` says which. Where a cell has several checkpoints (or evaluations) of
        one seed, the newest wins. Intervals: :meth:`mmgrid.query.Grid.summary`.
        """
        from mmgrid.registry.frames import grid_frame  # lazy: pandas (~0.5-1 s)

        return grid_frame(self, paradigm, variant, value, split, group, kind, seed)

    # -- aliases ------------------------------------------------------------------------
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

    def import_hf(self, path: str | Path, coords: Mapping[str, Any], **kw: Any) -> str:
        """Bring in a Hugging Face folder trained elsewhere (see :func:`mmgrid.registry.hf.import_hf`)."""
        return hf.import_hf(self, Path(path), coords, **kw)

    def verify(self) -> VerifyReport:
        """Re-hash every blob and file; report missing or corrupt ones, bad manifests and
        aliases, and temporary files left by killed writers."""
        return maintenance.verify(self)

    def gc(self, keep: Iterable[Any] | None = None, dry_run: bool = False, grace_s: float = 3600.0) -> GcReport:
        """Remove unreachable checkpoints, unreferenced blobs and stale temporary files
        (rule: :func:`mmgrid.registry.maintenance.gc`)."""
        return maintenance.gc(self, keep=keep, dry_run=dry_run, grace_s=grace_s)

    def iter_manifest_paths(self) -> list[Path]:
        return sorted((self.root / "manifests").glob("*/*.json"))

    def _forget(self, cid: str) -> None:
        self._manifests.pop(cid, None)

