"""verify (re-hash everything) and gc (drop what nothing needs).

gc rule:

* ``keep=None`` (default): every checkpoint stays; only blobs and files that no manifest
  references (left by killed writers or earlier gcs), stale temporary files (``tmp/``,
  a killed writer's litter) and verification records of blobs that are gone go.
* ``keep=[refs...]`` (ids, aliases, coords): the kept checkpoints, every aliased
  checkpoint, and all their ancestors (lineage) stay; every other manifest is deleted,
  then every blob and file no remaining manifest references.

Unreferenced blobs younger than ``grace_s`` (default one hour) are spared, because a
``put`` running at the same time may be about to reference them (a put that reuses a
blob touches it). Results files are never deleted: they are the history of what was
measured. Per-user files (``peruser/``) that no result record names (a writer killed
between the file and its record) go too, after the same grace period. Run gc when no
other process is writing, as with ``git gc``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from mmgrid.errors import RegistryError
import mmgrid.registry.aliases as alias_files
import mmgrid.registry.peruser as peruser
import mmgrid.registry.verified as verified
from mmgrid.registry.errors import RegistryWarning, UnsafePathError
from mmgrid.registry.index import Index
from mmgrid.registry.manifest import Manifest, read_manifest

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry


@dataclass
class VerifyReport:
    """What ``verify`` found; ``ok`` is True when nothing is missing, corrupt or unreadable.

    Temporary files (``temp_files``) do not make a registry not ok: nothing reads them;
    they are listed so that a killed writer's litter is seen, and ``gc`` removes them.
    """

    checkpoints: int = 0
    blobs_checked: int = 0
    missing: list[tuple[str, str, str]] = field(default_factory=list)  # (checkpoint id, tensor/file name, sha)
    corrupt: list[str] = field(default_factory=list)  # paths of blobs whose bytes do not hash to their name
    affected: list[str] = field(default_factory=list)  # checkpoint ids using a missing or corrupt blob
    bad_manifests: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # bad manifest or alias path -> what is wrong
    bad_aliases: list[str] = field(default_factory=list)  # alias files that are broken or point nowhere
    orphans: int = 0  # unreferenced blobs (harmless; gc removes them)
    temp_files: list[str] = field(default_factory=list)  # tmp/ files: writes in flight or a killed writer's litter
    per_user_checked: int = 0  # per-user parquet files re-hashed (corrupt ones are listed in ``corrupt``)
    per_user_missing: list[tuple[str, str]] = field(default_factory=list)  # (record key, per-user path) not on disk
    bad_per_user_refs: list[tuple[str, str]] = field(default_factory=list)  # (record key, path) naming no per-user file
    index_problems: list[str] = field(default_factory=list)  # where index.sqlite disagreed with the files
    # (what they share, their ids oldest first): checkpoints with equal coords, kind and seed (a warning)
    duplicates: list[tuple[str, list[str]]] = field(default_factory=list)
    outside_links: list[tuple[str, str]] = field(default_factory=list)  # (path, target): links leaving the root

    @property
    def ok(self) -> bool:
        return not (self.missing or self.corrupt or self.bad_manifests or self.bad_aliases or self.per_user_missing
                    or self.bad_per_user_refs or self.index_problems or self.outside_links)

    def summary(self) -> str:
        head = "OK" if self.ok else "PROBLEMS FOUND"
        lines = [f"{head}: {self.checkpoints} checkpoints, {self.blobs_checked} blobs re-hashed, {self.orphans} unreferenced, "
                 f"{len(self.temp_files)} temporary files, {self.per_user_checked} per-user files re-hashed"]
        lines += [f"missing: {sha} ({name} of {cid})" for cid, name, sha in self.missing]
        lines += [f"corrupt: {p}" for p in self.corrupt]
        lines += [f"bad manifest: {p}: {self.problems.get(p, '')}" for p in self.bad_manifests]
        lines += [f"bad alias: {p}: {self.problems.get(p, '')}" for p in self.bad_aliases]
        lines += [f"missing per-user file: {rel} (result record {key}); evaluate again or restore it"
                  for key, rel in self.per_user_missing]
        lines += [f"bad per-user reference: {rel!r} (result record {key}) is not peruser/xx/<sha256>.parquet"
                  for key, rel in self.bad_per_user_refs]
        lines += [f"index disagreed with the files: {p}" for p in self.index_problems]
        lines += [f"link out of the registry (refused on read): {p} -> {t}; replace it with the file itself or "
                  "delete it" for p, t in self.outside_links]
        if self.index_problems:
            lines.append("the files are the source of truth: `mmgrid registry reindex ROOT` rebuilds the index from "
                         "them (an index this process already brought in line needs nothing more; a results file or "
                         "manifest that vanished is lost unless restored from a backup).")
        lines += duplicate_lines(self.duplicates)
        if self.affected:
            lines.append(f"affected checkpoints: {', '.join(self.affected)}; restore the blobs from a backup or re-create them.")
        if self.temp_files:
            lines.append(f"temporary files (left by killed writers unless a write is running now; "
                         f"`mmgrid registry gc ROOT` removes those older than its --grace): {len(self.temp_files)}")
            lines += [f"  {p}" for p in self.temp_files[:50]]
            if len(self.temp_files) > 50:
                lines.append(f"  ... and {len(self.temp_files) - 50} more")
        return "\n".join(lines)


@dataclass
class GcReport:
    removed_checkpoints: list[str] = field(default_factory=list)
    removed_blobs: int = 0
    removed_files: int = 0
    removed_temp: int = 0  # temporary files (a killed writer's litter)
    removed_records: int = 0  # verification records of blobs that are gone
    removed_per_user: int = 0  # per-user files no result record names (a writer killed before its record)
    freed_bytes: int = 0
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (f"{verb} {len(self.removed_checkpoints)} checkpoints, {self.removed_blobs} blobs, "
                f"{self.removed_files} files, {self.removed_per_user} per-user files, {self.removed_temp} temporary files, "
                f"{self.removed_records} stale verification records ({self.freed_bytes / 1e6:.1f} MB)")


def _manifests(reg: "Registry", report: VerifyReport | None = None) -> dict[str, Manifest]:
    out: dict[str, Manifest] = {}
    for path in reg.iter_manifest_paths():
        try:
            m = read_manifest(path)
            if m.id != path.stem:
                raise RegistryError(f"manifest {path} claims id {m.id}; the file was renamed or edited.")
        except (RegistryError, OSError, ValueError) as exc:
            if report is None:
                raise
            report.bad_manifests.append(str(path))
            report.problems[str(path)] = str(exc)
            continue
        out[m.id] = m
    return out


def _refs(ms: dict[str, Manifest]) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[tuple[str, str]]]]:
    blobs: dict[str, list[tuple[str, str]]] = {}
    files: dict[str, list[tuple[str, str]]] = {}
    for m in ms.values():
        for name, b in m.blobs.items():
            blobs.setdefault(b.sha256, []).append((m.id, name))
        for name, sha in m.files.items():
            files.setdefault(sha, []).append((m.id, name))
    return blobs, files


def duplicate_coords(ms: dict[str, Manifest]) -> list[tuple[str, list[str]]]:
    """Groups of checkpoints with the same coordinates, kind and seed: (what they share, their ids,
    oldest first). Not an error: an earlier mmgrid's ids (``mmgrid registry remap-ids`` keeps them
    beside today's), a grid built from two spellings of its data before ids were content, or an
    import. Studies and reports pick a grid's checkpoints by the ids its plan computes, but looking
    one up by coordinates (``reg.get({...})``) needs an id or an extra coordinate there."""
    groups: dict[str, list[Manifest]] = {}
    for m in ms.values():
        coords = ", ".join(f"{k}={v}" for k, v in sorted(m.coords.items()))
        groups.setdefault(f"{coords}, kind={m.kind}, seed={m.seed}", []).append(m)
    return [(key, [m.id for m in sorted(g, key=lambda m: (m.created, m.id))])
            for key, g in sorted(groups.items()) if len(g) > 1]


def duplicate_lines(duplicates: list[tuple[str, list[str]]], limit: int = 20) -> list[str]:
    """The warning lines of :func:`duplicate_coords`' groups (at most ``limit`` groups listed)."""
    if not duplicates:
        return []
    n = sum(len(ids) for _, ids in duplicates)
    lines = [f"warning: {len(duplicates)} groups of checkpoints ({n} in all) share coordinates, kind and seed "
             "(not an error: studies and reports pick a grid's checkpoints by its planned ids; name one of these "
             "by id where you look it up by coordinates):"]
    lines += [f"  {key}: {', '.join(i[:12] for i in ids)}" for key, ids in duplicates[:limit]]
    if len(duplicates) > limit:
        lines.append(f"  ... and {len(duplicates) - limit} more groups")
    return lines


def verify(reg: "Registry") -> VerifyReport:
    """Re-hash every blob and file on disk (never trusting a verification record), check
    every manifest's names and references and every alias, and list temporary files."""
    report = VerifyReport()
    ms = _manifests(reg, report)
    report.checkpoints = len(ms)
    blob_refs, file_refs = _refs(ms)
    affected: set[str] = set()
    for refs, paths in ((blob_refs, reg.store.iter_blobs()), (file_refs, reg.store.iter_files())):
        on_disk = {p.name.split(".")[0]: p for p in paths}
        for sha, path in on_disk.items():
            report.blobs_checked += 1
            if sha not in refs:
                report.orphans += 1
            if not reg.store.check(path):
                report.corrupt.append(str(path))
                affected.update(cid for cid, _ in refs.get(sha, []))
        for sha, users in refs.items():
            if sha not in on_disk:
                verified.discard(sha)
                report.missing.extend((cid, name, sha) for cid, name in users)
                affected.update(cid for cid, _ in users)
    report.affected = sorted(affected)
    rows, bad = alias_files.scan(reg.root)
    for alias_path, problem in bad:
        report.bad_aliases.append(alias_path)
        report.problems[alias_path] = problem
    for name, cid, _ in rows:
        if cid not in ms:
            alias_path = str(reg.root / "aliases" / f"{name}.json")
            report.bad_aliases.append(alias_path)
            report.problems[alias_path] = f"points at {cid}, which has no (valid) manifest; re-point or delete the alias."
    report.temp_files = [str(p) for p in reg.store.temp_files()]
    report.duplicates = duplicate_coords(ms)
    _verify_links(reg, report)
    _verify_per_user(reg, report)
    _verify_index(reg, report)
    return report


def _verify_links(reg: "Registry", report: VerifyReport) -> None:
    """List every symlink inside the registry whose target lies outside its root (each is refused on read)."""
    from mmgrid.registry.contain import escaping_links  # lazy: only verify walks every folder

    report.outside_links = escaping_links(reg.root)


def _verify_index(reg: "Registry", report: VerifyReport) -> None:
    """Compare the index with one built from the files now; list what it served differently
    (including what this process's opening sync already found and brought in line)."""
    if not reg.indexed:
        return  # worker mode: the index is built from the files anyway
    report.index_problems = list(reg.index_repairs)
    if reg.index_broken is not None:
        report.index_problems.append(str(reg.index_broken))
        return
    fresh = Index(reg.root, ":memory:")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegistryWarning)  # unreadable files are listed above already
        fresh.rebuild()
    try:
        report.index_problems += [f"{reg.root / 'index.sqlite'}: {d}" for d in reg.index_differences(fresh)]
    finally:
        fresh.close()


def _verify_per_user(reg: "Registry", report: VerifyReport) -> None:
    """Re-hash every per-user file; list records naming a missing file or a path that is not one."""
    for path in peruser.iter_files(reg.root):
        report.per_user_checked += 1
        if not peruser.check(path):
            report.corrupt.append(str(path))
    for rel, keys in peruser.references(reg.root).items():
        try:
            path = peruser.resolve(reg.root, rel)
        except UnsafePathError:
            report.bad_per_user_refs.extend((k, rel) for k in keys)
            continue
        if not path.is_file():
            report.per_user_missing.extend((k, rel) for k in keys)


def _live(reg: "Registry", ms: dict[str, Manifest], keep: Iterable[Any]) -> set[str]:
    roots = {reg.resolve(k) for k in keep} | {cid for cid in reg.aliases().values() if cid in ms}
    live, stack = set(), list(roots)
    while stack:
        cid = stack.pop()
        if cid in live or cid not in ms:
            continue
        live.add(cid)
        stack.extend(p.id for p in ms[cid].parents)
    return live


def gc(reg: "Registry", keep: Iterable[Any] | None = None, dry_run: bool = False, grace_s: float = 3600.0) -> GcReport:
    """Remove unreachable checkpoints and unreferenced blobs (rule in the module docstring)."""
    if not grace_s >= 0:  # also refuses NaN
        raise RegistryError(f"gc grace period {grace_s!r} s must be a number >= 0 (0 when no other process writes).")
    report = GcReport(dry_run=dry_run)
    ms = _manifests(reg)
    if keep is not None:
        live = _live(reg, ms, keep)
        report.removed_checkpoints = sorted(set(ms) - live)
        if not dry_run:
            reg.remove_checkpoints(report.removed_checkpoints)
        ms = {cid: m for cid, m in ms.items() if cid in live}
    blob_refs, file_refs = _refs(ms)
    cutoff = time.time() - grace_s
    for paths, refs, counter in ((reg.store.iter_blobs(), blob_refs, "removed_blobs"),
                                 (reg.store.iter_files(), file_refs, "removed_files")):
        for path in paths:
            sha = path.name.split(".")[0]
            st = path.stat()
            if sha in refs or st.st_mtime > cutoff:
                continue
            setattr(report, counter, getattr(report, counter) + 1)
            report.freed_bytes += st.st_size
            if not dry_run:
                path.unlink(missing_ok=True)
    for tmp in reg.store.temp_files():
        try:
            st = tmp.lstat()
        except FileNotFoundError:  # its writer finished meanwhile
            continue
        if st.st_mtime <= cutoff:
            report.removed_temp += 1
            report.freed_bytes += st.st_size
            if not dry_run:
                tmp.unlink(missing_ok=True)
    referenced = set(peruser.references(reg.root))
    for path in peruser.iter_files(reg.root):
        st = path.stat()
        if path.relative_to(reg.root).as_posix() in referenced or st.st_mtime > cutoff:
            continue
        report.removed_per_user += 1
        report.freed_bytes += st.st_size
        if not dry_run:
            path.unlink(missing_ok=True)
    on_disk = {p.name.split(".")[0] for p in reg.store.iter_blobs()}
    for rec in reg.store.records.all():
        if rec.name not in on_disk:
            report.removed_records += 1
            if not dry_run:
                rec.unlink(missing_ok=True)
    return report

