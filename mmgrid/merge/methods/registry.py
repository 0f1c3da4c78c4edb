"""The table of merge methods: name -> class, with where each comes from. A leaf of the methods
package: method modules import :func:`register` from here; :mod:`mmgrid.merge.methods` imports
every built-in method module and answers the lookups (:func:`mmgrid.merge.methods.get_method`).

Installed distributions add methods through the entry-point group ``mmgrid.merge_methods``
(:mod:`mmgrid.plugins`; docs/extending.md): the entry point's name is the method's ``name`` and
its value the :class:`~mmgrid.merge.methods.base.Method` subclass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmgrid.errors import PluginError
from mmgrid.merge.methods.base import Method
from mmgrid.plugins import GROUPS, PluginTable, Source


def check_method(name: str, obj: Any, source: Source) -> None:
    """Refuse (PluginError) what is not a merge method: a :class:`Method` subclass whose ``name`` is
    ``name``, with a ``Params`` dataclass."""
    where = f"merge method {name!r} of {source}"
    if not (isinstance(obj, type) and issubclass(obj, Method)):
        raise PluginError(f"{where}: {obj!r} is not a subclass of mmgrid.merge.methods.Method; point the entry "
                          "point at the method class (docs/extending.md).")
    if getattr(obj, "name", None) != name:
        raise PluginError(f"{where}: the class {obj.__qualname__} is named {getattr(obj, 'name', None)!r}; the "
                          "entry point's name and the class's `name` must be the same.")
    if not dataclasses.is_dataclass(getattr(obj, "Params", None)):
        raise PluginError(f"{where}: {obj.__qualname__}.Params is not a dataclass; declare the method's "
                          "parameters as a @dataclass (an empty one when it takes none).")


METHODS = PluginTable("merge method", GROUPS["merge method"], check=check_method)


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method available under ``cls.name`` (PluginError when another
    source registers that name)."""
    METHODS.register(cls.name, cls)
    return cls
