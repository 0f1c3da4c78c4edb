"""Evaluations of a registry: records, per-user values, intervals, results tables (a mixin of
:class:`~mmgrid.registry.api.Registry`; storage in ``results.py`` and ``peruser.py``)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Mapping, cast

import mmgrid.registry.peruser as peruser
from mmgrid.registry.guard import Guarded, writes
from mmgrid.registry.index import Index
from mmgrid.registry.results import ResultsLog, make_record

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from mmgrid.registry.api import Registry
    from mmgrid.registry.manifest import Manifest
    from mmgrid.registry.store import BlobStore


class Evaluations(Guarded):
    """record_eval, recording, put_per_user, per_user, results, grid."""

    _log: ResultsLog
    _rec: threading.local
    durable: bool
    store: BlobStore

    if TYPE_CHECKING:  # defined by Registry, the class this mixin is part of
        def resolve(self, ref: str | Mapping[str, Any] | Manifest) -> str: ...
        def _reader(self) -> Index: ...

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
        pending = getattr(self._rec, "pending", None)
        if pending is not None:  # inside recording(): written with the others at its end
            pending.append(rec)
        else:
            self._write_records([rec])
        return rec["key"]

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Group writes of one evaluation: its per-user file and every ``record_eval`` inside the block
        are recorded together (one append, one index transaction) when the block ends, or not at all
        when it raises or the disk is full. gc waits for the block (writers' lock).

        Raises:
            ReadOnlyRegistryError: before the block runs, if the registry cannot be written.
        """
        if getattr(self._rec, "pending", None) is not None:  # nested: the outer block writes
            yield
            return
        self.require_writable("recording evaluations")
        if self._index_broken is not None:
            raise self._index_broken
        with self._guard("recording evaluations"):
            self._ensure_created()
        try:
            with self._guard("recording evaluations"), self._writers.shared():
                self._rec.pending, self._rec.new_files = [], []
                try:
                    yield
                    pending = self._rec.pending
                finally:
                    self._rec.pending = None
                if pending:
                    self._write_records(pending)
        except BaseException:
            for path in self._rec.new_files:  # per-user files no record will name (and folders they made)
                path.unlink(missing_ok=True)
                for folder in (path.parent, path.parent.parent):
                    try:
                        folder.rmdir()
                    except OSError:
                        break  # not empty
            self._undo_created()
            raise
        finally:
            self._rec.new_files = []
        self._made = None

    @writes("recording an evaluation")
    def _write_records(self, records: list[dict[str, Any]]) -> None:
        """Append records to this process's results file and index them: all or none."""
        start = self._log.append(*records)
        if not self.indexed:
            return
        path = self._log.path
        assert path is not None  # append() opened this process's results file

        def add(conn: Any) -> None:
            Index.track_results_file(conn, path)
            for rec in records:
                Index.add_record(conn, rec, path.name)

        try:
            self._index.write(add)
        except BaseException:
            self._log.undo(start)  # the file is the source of truth: what the index lacks is not recorded
            raise

    @writes("storing per-user values")
    def put_per_user(self, users: Any, active: Any, metrics: Mapping[str, Any]) -> str:
        """Store one evaluation's per-user values (``peruser.py``); returns the path to put in ``extra.per_user``."""
        data = peruser.to_parquet(*peruser.check_columns(users, active, metrics))
        rel = peruser.rel_path(data)
        new = not (self.root / rel).exists()
        peruser.write(self.root, self.store.tmp, data, self.durable)
        if new and getattr(self._rec, "pending", None) is not None:
            self._rec.new_files.append(self.root / rel)  # removed again if the recording() block fails
        return rel

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

        return grid_frame(cast("Registry", self), paradigm, variant, value, split, group, kind, seed)
