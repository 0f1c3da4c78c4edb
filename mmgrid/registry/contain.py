"""No path read from a registry leaves its root: a symlink inside the registry (a results file, an alias, a
manifest, a blob) whose target lies outside is refused on read and listed by ``verify``, the way git refuses
to follow a symlink out of its work tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from mmgrid.registry.errors import UnsafePathError

FOLDERS = ("results", "aliases", "manifests", "blobs", "files", "peruser", "verified")


def outside(root: Path, path: Path) -> Path | None:
    """Where ``path`` leads when that is outside ``root`` (following every symlink on the way); None when it
    stays inside (or does not exist: nothing is read)."""
    try:
        real = Path(os.path.realpath(path))
        base = Path(os.path.realpath(root))
    except (OSError, ValueError):
        return None
    if real == base or base in real.parents:
        return None
    return real


def check_inside(root: Path, path: Path, what: str) -> Path:
    """``path`` if it stays inside ``root``; else :class:`UnsafePathError` naming it, its target and the fix."""
    target = outside(root, path)
    if target is not None:
        raise UnsafePathError(f"{what} {path} is a link to {target}, outside the registry {root}; refused. Replace "
                              f"the link with the file itself (copy it into the registry) or delete it.")
    return path


def escaping_links(root: Path) -> list[tuple[str, str]]:
    """(path, target) of every entry under the registry's folders that leads outside ``root``."""
    out: list[tuple[str, str]] = []
    for name in FOLDERS:
        top = Path(root) / name
        if not top.exists() and not top.is_symlink():
            continue
        stack = [top]
        while stack:
            p = stack.pop()
            target = outside(root, p) if p.is_symlink() or p == top else None
            if target is not None:
                out.append((str(p), str(target)))
                continue
            if p.is_dir() and not p.is_symlink():
                try:
                    stack.extend(sorted(p.iterdir(), reverse=True))
                except OSError:
                    continue
    return sorted(out)
