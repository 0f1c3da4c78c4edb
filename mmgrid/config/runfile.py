"""The saved run, ``mmgrid-run.yaml``: a grid whose paths are relative to its own folder.

A run folder (what ``mmgrid demo --out``, ``mmgrid build`` and ``mmgrid report --out`` leave)
holds ``mmgrid-run.yaml``: the resolved grid of the command that wrote it, so that a follow-up
names the folder instead of repeating the grid and its overrides. Its three paths
(``registry``, ``prepared``, ``data.root``) are stored **relative to the run folder**, so that
``mv runs/demo runs/demo-v1`` and ``cp -a runs/demo runs/exp`` give a working run that reads
and writes only its own registry. A path the user gave outside the run folder (a shared
dataset, the registry a report folder reads) is listed in the file's ``run.external`` and
stored absolute (relative when the folder lies inside the run folder that holds the path: a
report folder inside its run); a path that leaves the run folder without being listed there is refused
(:class:`~mmgrid.errors.ConfigError`), so a copied or hand-edited run file never writes into
another run's registry unannounced.

Run files written before paths were relative (no ``run:`` section, absolute paths) keep
working. One of their paths that points outside the run folder while the run folder holds a
folder of the same name (``registry/``, ``prepared/``, ``world/``: the run was moved or copied)
is read from the run's own folder, with a note saying so; otherwise the absolute path is used
as written (an older report folder naming its run's registry).

Reading a run's registry (:func:`run_registry`) is checked: a registry that is missing, is not
a registry (no ``manifests/`` folder) or is a symlink loop is a named
:class:`~mmgrid.errors.RegistryError`, never an empty answer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mmgrid.config.grid import GridConfig, grid_from_dict
from mmgrid.configtools import apply_overrides, load_yaml
from mmgrid.errors import ConfigError, RegistryError

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig

RUN_FILE = "mmgrid-run.yaml"
FORMAT = 2  # run.format: 2 = paths relative to the run folder (absent: absolute paths, the older files)
PATH_FIELDS = ("registry", "prepared", "data.root")  # the run file's paths, by their grid keys


@dataclass
class SavedRun:
    """A run file read: its folder, the grid as a dict with every path absolute, and the notes
    the reading left (an older file's path read from the run's own folder)."""

    file: Path
    grid: dict[str, Any]
    external: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.file.parent

    def path(self, key: str) -> str | None:
        """The absolute path of one of :data:`PATH_FIELDS` (None when the file names none)."""
        return _get(self.grid, key)


def _get(data: dict[str, Any], key: str) -> Any:
    head, _, rest = key.partition(".")
    if not rest:
        return data.get(head)
    sub = data.get(head)
    return sub.get(rest) if isinstance(sub, dict) else None


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    head, _, rest = key.partition(".")
    if rest:
        data.setdefault(head, {})[rest] = value
    else:
        data[head] = value


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def _resolve(path: Path, what: str) -> Path:
    """``path`` made absolute with its symlinks followed; a symlink loop is a named error."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symlink loop (Python < 3.13), OSError: ELOOP
        raise RegistryError(f"{what} {path} is a symlink loop ({exc}); point it at a real folder.") from exc


def find_run(path: str | Path) -> Path | None:
    """The ``mmgrid-run.yaml`` of a run folder, or of the run a registry folder belongs to
    (its parent folder's, when that file names this registry); None if there is none."""
    p = Path(path)
    if p.is_file() and p.name == RUN_FILE:
        return p
    if (p / RUN_FILE).is_file():
        return p / RUN_FILE
    if not (p / "manifests").is_dir():
        return None
    parent = _resolve(p, "the registry").parent / RUN_FILE
    if parent.is_file():
        try:
            reg = read_run(parent).path("registry")
        except ConfigError:
            return None
        if reg is not None and _resolve(Path(reg), "the registry") == _resolve(p, "the registry"):
            return parent
    return None


def is_run_file(path: str | Path) -> bool:
    """True for a path to a ``mmgrid-run.yaml`` (what :func:`load_run` reads)."""
    p = Path(path)
    return p.name == RUN_FILE and p.is_file()


def read_run(run_file: str | Path) -> SavedRun:
    """Read a run file: its grid with the paths made absolute by the rule of this module.

    Raises:
        ConfigError: the file cannot be read or is not a mapping, a path field is not a string,
            or a path leaves the run folder without being listed in ``run.external``.
    """
    f = Path(run_file)
    try:
        data = load_yaml(f.read_text(), str(f)) or {}
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ConfigError(f"{f}: cannot read the saved run ({exc}); restore it or pass a grid YAML.") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{f}: a saved run is a mapping (the grid's keys); restore it or pass a grid YAML.")
    meta = data.pop("run", None)
    if meta is not None and not isinstance(meta, dict):
        raise ConfigError(f"{f}: `run:` must be a mapping (format, external); restore the file or pass a grid YAML.")
    meta = meta or {}
    external = meta.get("external") or []
    if not isinstance(external, list) or not all(k in PATH_FIELDS for k in external):
        raise ConfigError(f"{f}: run.external must list some of {list(PATH_FIELDS)}, not {external!r}.")
    folder = _resolve(f.parent, "the run folder")
    out = SavedRun(f, data, list(external))
    moved: list[str] = []
    for key in PATH_FIELDS:
        value = _get(data, key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{f}: {key} must be a path (a string), not {value!r}; write the folder's path, "
                              "relative to the run folder.")
        if meta:  # format 2: relative to the run folder
            target = Path(value) if os.path.isabs(value) else f.parent / value
            where = _resolve(target, f"{f}: {key}")
            if not _inside(where, folder) and key not in external:
                raise ConfigError(
                    f"{f}: {key} {value!r} leaves the run folder {f.parent} ({where}) and is not listed in "
                    f"run.external; a run reads and writes only its own folders. Point {key} inside the run "
                    f"(relative to it), or, if this run is meant to use that folder, add {key} to run.external.")
            _set(data, key, str(where))
            continue
        # an older run file: absolute paths
        where = _resolve(Path(value) if os.path.isabs(value) else f.parent / value, f"{f}: {key}")
        own = folder / where.name
        if not _inside(where, folder) and own.exists() and _resolve(own, f"{f}: {key}") != where:
            moved.append(f"{key} {value} -> {own}")
            where = own
        elif not _inside(where, folder):
            out.external.append(key)
        _set(data, key, str(where))
    if moved:
        out.notes.append(f"{f} is an older run file (absolute paths) naming folders outside its run folder, while the "
                         f"run holds its own (it was moved or copied); using the run's own: {'; '.join(moved)}. "
                         f"`mmgrid build {f.parent}` rewrites the file with paths relative to the run.")
    return out


def run_registry(run: SavedRun) -> Path:
    """The registry a saved run names, checked: present, a registry, no symlink loop.

    Raises:
        RegistryError: the run names no registry, or one that is missing, not a registry, or a loop.
    """
    reg = run.path("registry")
    if reg is None:
        raise RegistryError(f"{run.file} names no registry; add `registry: registry` (the run's own) to it, "
                            "or pass --registry PATH.")
    p = Path(reg)
    if not p.exists():
        raise RegistryError(f"{run.file} names the registry {p}, which does not exist; build the run first "
                            f"(`mmgrid build {run.folder}`), or fix `registry:` in it (relative to the run folder).")
    if not (p / "manifests").is_dir():
        raise RegistryError(f"{run.file} names {p} as its registry, which is not a registry (no manifests/ folder); "
                            f"fix `registry:` in it (relative to the run folder), or pass --registry PATH.")
    return p


def load_run(run_file: str | Path, overrides: list[str] | None = None, notes: list[str] | None = None) -> GridConfig:
    """The :class:`~mmgrid.config.grid.GridConfig` of a run file (paths by this module's rule),
    with ``overrides`` applied (an override's path is as the user typed it: relative to the
    current folder); the reading's notes are appended to ``notes``."""
    run = read_run(run_file)
    if notes is not None:
        notes.extend(run.notes)
    return grid_from_dict(apply_overrides(run.grid, overrides), where=str(run.file))


def _enclosing_run(folder: Path) -> Path | None:
    """The nearest folder above ``folder`` holding a run file (None when there is none)."""
    for parent in folder.parents:
        if (parent / RUN_FILE).is_file():
            return parent
    return None


def run_dict(cfg: GridConfig, folder: str | Path) -> dict[str, Any]:
    """What :func:`mmgrid.cli.context.save_run` writes into ``folder/mmgrid-run.yaml`` for ``cfg``:
    the grid, its paths relative to ``folder`` where they lie inside it; listed in
    ``run.external`` where they do not, then relative when ``folder`` lies inside a run folder
    that holds them (a report folder in its run: the two move together), else absolute."""
    data = cfg.to_dict()
    base = _resolve(Path(folder), "the run folder")
    external = []
    for key in PATH_FIELDS:
        value = _get(data, key)
        if value is None:
            continue
        where = _resolve(Path(value), key)
        if _inside(where, base):
            _set(data, key, where.relative_to(base).as_posix() or ".")
            continue
        external.append(key)
        run = _enclosing_run(base)
        # a report folder inside a run naming that run's registry: relative, so it moves with the run
        _set(data, key, os.path.relpath(where, base) if run is not None and _inside(where, run) else str(where))
    meta: dict[str, Any] = {"format": FORMAT}
    if external:
        meta["external"] = external
    return {"run": meta, **data}
