"""The registry of merge methods: name -> class. A leaf: method modules import
:func:`register` from here; :mod:`mmgrid.merge.methods` imports every method module and
answers the lookups (:func:`mmgrid.merge.methods.get_method`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmgrid.merge.methods.base import Method

METHODS: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method available under ``cls.name``."""
    METHODS[cls.name] = cls
    return cls
