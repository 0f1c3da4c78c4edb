"""Manifests: one JSON file per checkpoint, the registry's source of truth.

``manifests/ab/ab12...json`` holds the checkpoint's identity (coords, kind, parents with
roles, params, config hash, seed), where it came from (code version, data fingerprint,
creation time) and what it is made of (tensor name -> blob hash, shape, dtype; file name
-> blob hash). The SQLite index is only a cache of these files.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from mmgrid._version import __version__
from mmgrid.fileio.safetensors import ST_DTYPES
from mmgrid.registry.contain import check_inside
from mmgrid.registry.errors import RegistryError, UnsafePathError
from mmgrid.registry.names import check_kind, is_file_name, is_id, is_sha256, normalize_coords

FORMAT = 1


class Parent(NamedTuple):
    """One lineage edge into a checkpoint; unpacks as ``(id, role)``."""

    id: str
    role: str


@dataclass(frozen=True)
class BlobRef:
    """Where one tensor lives: its blob hash, shape and safetensors dtype name ("F32", "BF16"...)."""

    sha256: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int = 0


@dataclass
class Manifest:
    """Everything the registry knows about one checkpoint."""

    id: str
    coords: dict[str, Any]
    kind: str
    parents: list[Parent] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # name -> sha256
    blobs: dict[str, BlobRef] = field(default_factory=dict)  # tensor name -> blob
    seed: int | None = None
    config_hash: str | None = None
    data_fingerprint: str | None = None
    code_version: str = ""
    created: str = ""

    @property
    def method(self) -> str | None:
        """How this checkpoint was made (``params["method"]`` when given)."""
        m = self.params.get("method")
        return str(m) if m is not None else None

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blobs.values())

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = FORMAT
        d["parents"] = [{"id": p.id, "role": p.role} for p in self.parents]
        d["blobs"] = {k: {"sha256": b.sha256, "shape": list(b.shape), "dtype": b.dtype, "nbytes": b.nbytes} for k, b in self.blobs.items()}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str = "") -> "Manifest":
        try:
            return cls(
                id=d["id"],
                coords=dict(d["coords"]),
                kind=d["kind"],
                parents=[Parent(p["id"], p["role"]) for p in d.get("parents", [])],
                params=dict(d.get("params") or {}),
                meta=dict(d.get("meta") or {}),
                files=dict(d.get("files") or {}),
                blobs={k: BlobRef(b["sha256"], tuple(b["shape"]), b["dtype"], int(b.get("nbytes", 0))) for k, b in d.get("blobs", {}).items()},
                seed=d.get("seed"),
                config_hash=d.get("config_hash"),
                data_fingerprint=d.get("data_fingerprint"),
                code_version=d.get("code_version", ""),
                created=d.get("created", ""),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RegistryError(f"manifest {where} is malformed ({exc!r}); restore it or run `mmgrid registry verify` to list bad manifests.") from exc

    def check_types(self, where: str = "") -> "Manifest":
        """Refuse a field of the wrong type (a seed that is not an integer, a coordinate that is a list...):
        what the report page, the index and the ids rely on. :meth:`check_paths` calls it, so every
        manifest written (``Registry.put``) and every manifest read is checked.

        Raises:
            RegistryError: naming each wrong field, its value and how to fix it.
        """
        bad = field_type_problems(seed=self.seed, config_hash=self.config_hash, data_fingerprint=self.data_fingerprint,
                                  code_version=self.code_version, created=self.created)
        if not isinstance(self.id, str):
            bad.append(f"id {self.id!r} is not a string")
        if not isinstance(self.kind, str):
            bad.append(f"kind {self.kind!r} is not a string")
        for name, value in (("coords", self.coords), ("params", self.params), ("meta", self.meta),
                            ("files", self.files), ("blobs", self.blobs)):
            if not isinstance(value, dict):
                bad.append(f"{name} {value!r} is not a mapping")
            elif not all(isinstance(k, str) for k in value):
                bad.append(f"{name} has a key that is not a string")
        if isinstance(self.coords, dict):
            bad += [f"coordinate {k!r} = {v!r} is a {type(v).__name__}, not a string or number"
                    for k, v in self.coords.items() if not isinstance(v, (str, int, float)) or isinstance(v, bool)]
        if not isinstance(self.parents, list):
            bad.append(f"parents {self.parents!r} is not a list")
        else:
            bad += [f"parent {p!r}: id and role must be strings" for p in self.parents
                    if not (isinstance(p.id, str) and isinstance(p.role, str))]
        if isinstance(self.files, dict):
            bad += [f"file {k!r} refers to {v!r}, not a string" for k, v in self.files.items() if not isinstance(v, str)]
        if isinstance(self.blobs, dict):
            bad += [f"tensor {k!r}: blob hash and dtype must be strings, nbytes an integer >= 0" for k, b in self.blobs.items()
                    if not (isinstance(b.sha256, str) and isinstance(b.dtype, str) and _is_count(b.nbytes))]
        if bad:
            raise RegistryError(f"manifest {where or self.id}: {'; '.join(bad[:5])}; the manifest was edited or "
                                "corrupted (or written by a caller passing the wrong type): restore it from a backup or "
                                "re-create the checkpoint (`mmgrid registry verify ROOT` lists every bad manifest).")
        return self

    def check_paths(self, where: str = "") -> "Manifest":
        """Refuse every name in the manifest that becomes a path and could leave the registry
        (or an export folder): the id, parent ids, file names, file and blob hashes.

        Raises:
            UnsafePathError: naming the field, the value and how to fix it.
            RegistryError: a blob's dtype is not a safetensors dtype.
        """
        self.check_types(where)
        fix = ("the manifest was edited or corrupted; restore it from a backup or delete it and re-create "
               "the checkpoint (`mmgrid registry verify ROOT` lists every bad manifest).")
        bad: list[str] = []
        if not is_id(self.id):
            bad.append(f"id {self.id!r} is not a checkpoint id (16 lowercase hex digits)")
        bad += [f"parent id {p.id!r} is not a checkpoint id" for p in self.parents if not is_id(p.id)]
        for name, sha in self.files.items():
            if not is_file_name(name):
                bad.append(f"file name {name!r} is not a plain file name (no '/', no '..'), so it could leave the export folder")
            if not is_sha256(sha):
                bad.append(f"file {name!r} refers to blob {sha!r}, not a sha256 (64 lowercase hex digits)")
        bad += [f"tensor {k!r} refers to blob {b.sha256!r}, not a sha256 (64 lowercase hex digits)"
                for k, b in self.blobs.items() if not is_sha256(b.sha256)]
        if bad:
            raise UnsafePathError(f"manifest {where or self.id}: {'; '.join(bad[:5])}; {fix}")
        try:  # what the index and the frames rely on
            normalize_coords(self.coords)
            check_kind(self.kind)
        except RegistryError as exc:
            raise RegistryError(f"manifest {where or self.id}: {exc} {fix}") from None
        wrong = sorted({str(b.dtype) for b in self.blobs.values()} - set(ST_DTYPES))
        wrong += [f"shape of {k!r}: {b.shape!r}" for k, b in self.blobs.items()
                  if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in b.shape)]
        if wrong:
            raise RegistryError(f"manifest {where or self.id} holds invalid dtypes or shapes ({', '.join(wrong[:5])}); {fix}")
        return self

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True, ensure_ascii=False)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def field_type_problems(*, seed: Any = None, config_hash: Any = None, data_fingerprint: Any = None,
                        code_version: Any = "", created: Any = "") -> list[str]:
    """What is wrong with the scalar fields of a manifest (empty when nothing): the seed must be an integer
    (or None), the hashes and provenance strings (or None). ``Registry.put`` calls it before it stores anything."""
    bad = []
    if seed is not None and not (isinstance(seed, int) and not isinstance(seed, bool)):
        bad.append(f"seed {seed!r} is a {type(seed).__name__}, not an integer")
    for name, value, optional in (("config_hash", config_hash, True), ("data_fingerprint", data_fingerprint, True),
                                  ("code_version", code_version, False), ("created", created, False)):
        if not (isinstance(value, str) or (optional and value is None)):
            bad.append(f"{name} {value!r} is a {type(value).__name__}, not a string")
    return bad


def read_manifest(path: Path) -> Manifest:
    path = Path(path)
    if path.parent.parent.name == "manifests":  # a registry's manifests/ab/<id>.json: it must not lead outside
        check_inside(path.parents[2], path, "manifest")
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"manifest {path} is not valid JSON ({exc}); restore it from a backup or delete it and re-create the checkpoint.") from exc
    if not isinstance(data, dict):
        raise RegistryError(f"manifest {path} holds a JSON {type(data).__name__}, not an object; restore it from a backup or delete it and re-create the checkpoint.")
    return Manifest.from_json(data, where=str(path)).check_paths(str(path))


@lru_cache(maxsize=1)
def code_version() -> str:
    """``mmgrid <version>`` plus the git commit of the source tree when there is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True, text=True, timeout=5, check=False,
        )
        sha = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+g{sha}" if sha else __version__
