"""Merge methods: one small module each, registered by name with typed parameters.

``get_method(name)``, ``method_names()`` and ``validate_params(name, params)`` are the
only places that know them all.
"""

from mmgrid.merge.methods.base import (
    Method,
    TensorView,
    get_method,
    method_names,
    register,
    validate_params,
)

__all__ = ["Method", "TensorView", "get_method", "method_names", "register", "validate_params"]
