"""The checkpoint-grid registry: content-addressed blobs, JSON manifests, a SQLite index.

See :mod:`mmgrid.registry.api` for the API and docs/registry.md for the design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Registry", "Manifest", "Parent", "BlobRef"]

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.registry.manifest import BlobRef, Manifest, Parent


# lazy: importing any registry module runs this file first; importing the API here would
# make every module of the package depend on api.py (an import cycle for the layering test)
# and cost ~0.1 s (sqlite3, the store) to code that needs only names or errors.
def __getattr__(name: str) -> Any:
    if name == "Registry":
        from mmgrid.registry.api import Registry  # lazy: see above

        return Registry
    if name in ("Manifest", "Parent", "BlobRef"):
        from mmgrid.registry import manifest  # lazy: see above

        return getattr(manifest, name)
    raise AttributeError(f"module 'mmgrid.registry' has no attribute {name!r}")
