"""mmgrid: continual learning and model merging of generative recommenders.

The public entry points are imported lazily so that ``import mmgrid`` stays cheap
(no torch import until a registry or model is used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmgrid._version import __version__
__all__ = ["Registry", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry


def __getattr__(name: str) -> Any:
    if name == "Registry":
        # lazy: the public `from mmgrid import Registry` without importing the registry (and torch,
        # ~3.5 s) on `import mmgrid`; resolved on first use (PEP 562), nothing below depends on it
        from mmgrid.registry.api import Registry

        return Registry
    raise AttributeError(f"module 'mmgrid' has no attribute {name!r}")
