"""The checkpoint-grid registry: content-addressed blobs, JSON manifests, a SQLite index.

See :mod:`mmgrid.registry.api` for the API and docs/registry.md for the design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Registry", "Manifest", "Parent", "BlobRef"]

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.registry.manifest import BlobRef, Manifest, Parent


def __getattr__(name: str) -> Any:
    if name == "Registry":
        from mmgrid.registry.api import Registry

        return Registry
    if name in ("Manifest", "Parent", "BlobRef"):
        from mmgrid.registry import manifest

        return getattr(manifest, name)
    raise AttributeError(f"module 'mmgrid.registry' has no attribute {name!r}")
