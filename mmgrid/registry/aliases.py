"""Aliases: ``aliases/<name>.json`` holds ``{"id": <checkpoint id>, "created": <time>}``.

An alias's name is checked when it is written; its target id is checked every time it is
read, since the file may have been edited: an id that is not 16 hex digits could name a
path outside the registry and is refused with :class:`UnsafePathError`.
"""

from __future__ import annotations

import json
from pathlib import Path

import mmgrid.registry.names as names
from mmgrid.registry.contain import check_inside
from mmgrid.registry.errors import RegistryError, UnsafePathError
from mmgrid.fileio.atomic import atomic_write


def alias_path(root: Path, name: str) -> Path:
    return Path(root) / "aliases" / f"{names.check_alias(name)}.json"


def _parse(path: Path) -> tuple[str, str | None]:
    """(target id, created) of one alias file.

    Raises:
        RegistryError: the file is not an alias file; UnsafePathError: its id is not an id.
    """
    fix = f"re-point it with `mmgrid registry alias ROOT {path.stem} ID`, or delete {path}."
    check_inside(path.parent.parent, path, f"alias {path.stem!r}")
    try:
        data = json.loads(path.read_text())
        cid = data["id"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"alias {path.stem!r} ({path}) is not a valid alias file ({exc!r}); {fix}") from exc
    if not names.is_id(cid):
        raise UnsafePathError(
            f"alias {path.stem!r} ({path}) points at {cid!r}, which is not a checkpoint id (16 lowercase hex "
            f"digits) and could name a path outside the registry; the file was edited or corrupted: {fix}"
        )
    created = data.get("created")
    return cid, created if isinstance(created, str) else None


def read_alias(root: Path, name: str) -> str | None:
    """The id an alias points at, or None when there is no such alias (invalid names included).

    Raises:
        RegistryError, UnsafePathError: the alias file is broken (see :func:`_parse`).
    """
    if not names.is_alias(name):
        return None
    path = Path(root) / "aliases" / f"{name}.json"
    if not path.is_file():
        return None
    return _parse(path)[0]


def scan(root: Path) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str]]]:
    """Every valid alias as (name, id, created), and every broken one as (path, problem)."""
    rows, bad = [], []
    adir = Path(root) / "aliases"
    for f in sorted(adir.glob("*.json")) if adir.is_dir() else ():
        try:
            if not names.is_alias(f.stem):
                raise UnsafePathError(f"alias file {f} has a name that is not an alias; delete it.")
            cid, created = _parse(f)
        except RegistryError as exc:
            bad.append((str(f), str(exc)))
            continue
        rows.append((f.stem, cid, created))
    return rows, bad


def write_alias(root: Path, name: str, cid: str, tmp: Path, durable: bool) -> str:
    """Point ``name`` at ``cid`` (atomically); returns the creation time written."""
    created = names.now_iso()
    data = json.dumps({"id": cid, "created": created}).encode()
    atomic_write(alias_path(root, name), data, tmp, durable)
    return created
