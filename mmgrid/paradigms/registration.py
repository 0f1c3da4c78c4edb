"""The table of registered paradigms: :func:`register_paradigm` fills it, :func:`lookup` reads it.

A leaf module: the paradigm modules import it to register themselves, and the package
(``mmgrid.paradigms``) re-exports it, loading every paradigm module before a lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from mmgrid.errors import UnknownNameError

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.paradigms.base import Paradigm

Factory = Callable[[], "Paradigm[Any]"]

_FACTORIES: dict[str, Factory] = {}


def register_paradigm(name: str) -> Callable[[Factory], Factory]:
    """Class decorator: make a paradigm available under ``name``."""

    def deco(factory: Factory) -> Factory:
        _FACTORIES[name] = factory
        return factory

    return deco


def lookup(name: str) -> "Paradigm":
    """A new instance of the paradigm registered as ``name`` (UnknownNameError lists the known names)."""
    if name not in _FACTORIES:
        raise UnknownNameError("paradigm", name, list(_FACTORIES))
    return _FACTORIES[name]()


def registered_names() -> list[str]:
    """Names registered so far, sorted."""
    return sorted(_FACTORIES)
