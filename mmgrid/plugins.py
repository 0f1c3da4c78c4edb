"""Extension points: the named tables of merge methods, paradigms and studies, filled by mmgrid's
own modules, by Python code and by installed distributions.

A :class:`PluginTable` maps a name to an object and remembers where each came from (a
:class:`Source`): ``built-in`` (a module of mmgrid), ``python`` (registered from Python code,
e.g. ``mmgrid.merge.register_method(cls)`` in a script) or an installed distribution's entry point
in one of :data:`GROUPS` (``[project.entry-points."mmgrid.merge_methods"]`` in its
``pyproject.toml``; the entry point's name is the registered name; docs/extending.md).

Entry points are read lazily and in every process on its own: on the first lookup of a name the
table does not hold (only the entry points of that name are imported) and on the first listing
(all of them). A local pool worker or a Ray worker imports mmgrid afresh and finds the same
installed plugins as its driver.

Two sources registering one name is a :class:`~mmgrid.errors.PluginError` naming both (a plugin
never shadows a built-in); the same definition registered again (the same object, or a module
imported a second time, as a notebook cell run again) is not. An entry point that fails to import,
or holds what its group does not take, is a PluginError naming its distribution and entry point.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Literal

from mmgrid.errors import PluginError, UnknownNameError

__all__ = ["GROUPS", "Entry", "PluginTable", "Source", "source_of"]

# What each table holds -> the entry-point group an installed distribution fills it through.
GROUPS = {"merge method": "mmgrid.merge_methods", "paradigm": "mmgrid.paradigms", "study": "mmgrid.studies"}


@dataclass(frozen=True)
class Source:
    """Where a registered name comes from.

    Attributes:
        kind: ``built-in``, ``python`` or ``distribution``.
        origin: the defining module (built-in, python), or ``"NAME VERSION"`` of the distribution.
        entry_point: a distribution's entry point, ``"GROUP: NAME = MODULE:ATTR"``.
    """

    kind: Literal["built-in", "python", "distribution"]
    origin: str
    entry_point: str = ""

    def __str__(self) -> str:
        if self.kind == "distribution":
            return f"distribution {self.origin} (entry point {self.entry_point})"
        return f"{self.kind} module {self.origin}"


@dataclass(frozen=True)
class Entry:
    """One registered name: the object and its :class:`Source`."""

    name: str
    obj: Any
    source: Source


# The entry points this thread is importing right now (innermost last): a registration made while
# a distribution's module is imported (its ``@register`` decorators) is that distribution's.
_STATE = threading.local()


def _loading() -> list[Source]:
    if not hasattr(_STATE, "stack"):
        _STATE.stack = []
    return _STATE.stack


def source_of(obj: Any) -> Source:
    """The :class:`Source` of an object registered from Python: ``built-in`` when an mmgrid module
    defines it, else ``python`` (or the distribution whose entry point is being imported)."""
    stack = _loading()
    if stack:
        return stack[-1]
    module = getattr(obj, "__module__", None) or "?"
    builtin = module == "mmgrid" or module.startswith("mmgrid.")
    return Source("built-in" if builtin else "python", module)


def _definition(obj: Any) -> tuple[str, str] | None:
    """(defining file, qualified name): one definition however often its module was imported."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    qualname = getattr(obj, "__qualname__", None)
    path = getattr(module, "__file__", None)
    return (path, qualname) if path and qualname else None


class PluginTable:
    """Names of one kind (``"merge method"``, ``"paradigm"``, ``"study"``) with their sources,
    filled by :meth:`register` and by the entry points of ``group``.

    Args:
        kind: what the names are, as messages say it.
        group: the entry-point group installed distributions register through.
        check: called as ``check(name, obj, source)`` before anything is registered; raises
            :class:`~mmgrid.errors.PluginError` when ``obj`` is not what the table holds.
        defined_by: the function or class whose module defines a registered object (default: the
            object itself; a study's ``run`` for a :class:`~mmgrid.sweep.studies.Study` record).
    """

    def __init__(self, kind: str, group: str, check: Callable[[str, Any, Source], None] | None = None,
                 defined_by: Callable[[Any], Any] | None = None) -> None:
        self.kind, self.group, self.check = kind, group, check
        self.defined_by = defined_by or (lambda obj: obj)
        self._entries: dict[str, Entry] = {}
        self._points: list[metadata.EntryPoint] | None = None  # the group's entry points, read once
        self._loaded: set[tuple[str, str]] = set()  # (distribution, entry point name) registered
        self._busy: set[tuple[str, str]] = set()  # being imported (a plugin's import that looks a name up)
        self._lock = threading.RLock()

    def register(self, name: str, obj: Any, source: Source | None = None) -> Any:
        """Make ``obj`` available as ``name``; returns ``obj``.

        Raises:
            PluginError: ``name`` is registered already from another source, or ``check`` refuses ``obj``.
        """
        source = source or source_of(self.defined_by(obj))
        if self.check is not None:
            self.check(name, obj, source)
        with self._lock:
            old = self._entries.get(name)
            was = None if old is None else _definition(self.defined_by(old.obj))
            if old is not None and old.obj is not obj and (was is None or was != _definition(self.defined_by(obj))):
                raise PluginError(
                    f"{self.kind} {name!r} is registered twice: by {old.source} and by {source}. A name has one "
                    f"meaning; rename one of them (for a plugin: its entry point's name in group {self.group} and "
                    "what it registers), or uninstall the distribution you do not want.")
            if old is not None and not (old.source.kind == "python" and source.kind == "distribution"):
                source = old.source  # the same definition again: it keeps where it came from (a distribution
                # names what its module registered from Python while it was imported elsewhere first)
            self._entries[name] = Entry(name, obj, source)
        return obj

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test's temporary registration); nothing happens if it is not there."""
        with self._lock:
            self._entries.pop(name, None)

    def refresh(self) -> None:
        """Read the group's entry points again on the next miss or listing (a distribution installed
        while this process runs); what is registered stays."""
        with self._lock:
            self._points = None
            self._loaded.clear()

    def get(self, name: str) -> Any:
        """The object registered as ``name``, importing the entry points of that name on a miss.

        Raises:
            UnknownNameError: no source registers ``name`` (the message lists the known names).
            PluginError: an entry point of that name fails to import or clashes.
        """
        entry = self._entries.get(name)
        if entry is None:
            self._load(lambda ep: ep.name == name)
            entry = self._entries.get(name)
        if entry is None:
            known = set(self._entries) | {ep.name for ep in self._entry_points()}
            raise UnknownNameError(self.kind, name, sorted(known))
        return entry.obj

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except UnknownNameError:
            return False
        return True

    def entries(self, load: bool = True) -> list[Entry]:
        """Every registered name with its source, sorted by name; ``load``: every entry point of the
        group imported first (PluginError when one fails), else only what is registered now."""
        if load:
            self._load(lambda ep: True)
        with self._lock:
            return [self._entries[n] for n in sorted(self._entries)]

    def names(self) -> list[str]:
        """Every registered name, sorted (every entry point imported first)."""
        return [e.name for e in self.entries()]

    def failures(self) -> list[tuple[str, PluginError]]:
        """Import every entry point of the group; (entry point, error) for each that fails (a
        listing that shows what loads and what does not, ``mmgrid plugins``)."""
        out = []
        for ep in self._entry_points():
            def this(e: Any, ep: Any = ep) -> bool:
                return e is ep

            try:
                self._load(this)
            except PluginError as exc:
                out.append((f"{ep.name} = {ep.value}", exc))
        return out

    def _entry_points(self) -> list[metadata.EntryPoint]:
        with self._lock:
            if self._points is None:
                self._points = list(metadata.entry_points(group=self.group))
            return self._points

    def _load(self, want: Callable[[metadata.EntryPoint], bool]) -> None:
        """Import the entry points ``want`` picks that were not imported yet and register what they hold."""
        with self._lock:
            for ep in self._entry_points():
                dist = ep.dist
                key = (dist.name if dist is not None else "?", ep.name)
                if not want(ep) or key in self._loaded or key in self._busy:
                    continue
                origin = f"{dist.name} {dist.version}" if dist is not None else "(unknown distribution)"
                source = Source("distribution", origin, f"{self.group}: {ep.name} = {ep.value}")
                _loading().append(source)
                self._busy.add(key)
                try:
                    obj = ep.load()
                except PluginError:
                    raise
                except Exception as exc:  # noqa: BLE001 - whatever a plugin's import raises is named here
                    pkg = dist.name if dist is not None else "the package that declares it"
                    raise PluginError(
                        f"{self.kind} plugin {ep.name!r} cannot be imported: {source} raised "
                        f"{type(exc).__name__}: {exc}. Fix that package or uninstall it (pip uninstall {pkg}); "
                        "`mmgrid plugins` lists every plugin and whether it loads.") from exc
                finally:
                    _loading().pop()
                    self._busy.discard(key)
                self.register(ep.name, obj, source)
                self._loaded.add(key)  # a failure above is raised again on the next lookup, never forgotten
