"""The table of registered paradigms: :func:`register_paradigm` fills it, :func:`lookup` reads it.

A leaf module: the paradigm modules import it to register themselves, and the package
(``mmgrid.paradigms``) re-exports it, loading every paradigm module before a lookup. Installed
distributions add paradigms through the entry-point group ``mmgrid.paradigms`` (the entry point's
name is the paradigm's name, its value a factory: the paradigm class, called with no arguments);
see :mod:`mmgrid.plugins` and docs/extending.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from mmgrid.errors import PluginError
from mmgrid.plugins import GROUPS, PluginTable, Source

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.paradigms.base import Paradigm

Factory = Callable[[], "Paradigm[Any]"]


def _check_factory(name: str, obj: Any, source: Source) -> None:
    if not callable(obj):
        raise PluginError(f"paradigm {name!r} of {source}: {obj!r} is not callable; point the entry point at the "
                          "paradigm class (a factory taking no arguments, docs/extending.md).")


PARADIGMS = PluginTable("paradigm", GROUPS["paradigm"], check=_check_factory)


def register_paradigm(name: str) -> Callable[[Factory], Factory]:
    """Class decorator: make a paradigm available under ``name`` (PluginError when another source
    registers that name)."""

    def deco(factory: Factory) -> Factory:
        return PARADIGMS.register(name, factory)

    return deco


def lookup(name: str) -> "Paradigm":
    """A new instance of the paradigm registered as ``name`` (UnknownNameError lists the known names)."""
    return PARADIGMS.get(name)()


def registered_names() -> list[str]:
    """Names registered so far and those of every installed plugin, sorted."""
    return PARADIGMS.names()
