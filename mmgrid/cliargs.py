"""The command-line grammar every ``mmgrid`` command shares: its argparse pieces and how a
registry or a run is named. It imports nothing above the foundation layer (the run file's
reader, :mod:`mmgrid.config.runfile`, lazily), so any module may use it; loading a grid,
checking it against a registry and opening what a command needs is
:mod:`mmgrid.cli.context`, on the entry layer.

Naming a registry (``--registry``): every command that reads or writes a registry finds it the
same way, first match wins:

1. ``--registry PATH``: a registry folder, or a *run folder* (one holding ``mmgrid-run.yaml``,
   which names its registry);
2. ``$MMGRID_REGISTRY`` (the same two forms);
3. the run in the current folder (``./mmgrid-run.yaml``);
4. ``./runs/demo`` when ``mmgrid demo`` wrote it there.

A positional ``ROOT`` still works where older versions took one (``mmgrid query ROOT``) and
prints a deprecation note naming the new spelling. A note (:func:`note`) is printed by
:func:`mmgrid.cli.main` once the command has run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mmgrid.errors import RegistryError

RUN_FILE = "mmgrid-run.yaml"  # mmgrid.config.runfile.RUN_FILE (imported lazily: yaml stays out of `mmgrid --help`)
ENV = "MMGRID_REGISTRY"
DEMO_RUN = Path("runs/demo")
REGISTRY_HELP = (f"registry folder or run folder (default: ${ENV}, else ./{RUN_FILE}'s registry, "
                 f"else ./{DEMO_RUN}/registry)")


NOTES: list[str] = []  # printed by mmgrid.cli after the command (an error line stays the first line)


def note(text: str) -> None:
    """A remark for the user (a deprecated spelling, say), printed once the command has run."""
    if text not in NOTES:
        NOTES.append(text)


def flush_notes(show: bool = True) -> None:
    """Print (``show``) and forget the pending notes (stderr)."""
    for text in NOTES if show else []:
        print(f"mmgrid: note: {text}", file=sys.stderr)
    NOTES.clear()


def add_overrides(p: argparse.ArgumentParser) -> None:
    """Add the ``key=value`` positional overrides every config-driven command accepts."""
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override a config key, e.g. data.root=/data/amazon train.seed=1",
    )


def add_registry(p: argparse.ArgumentParser, *, legacy_root: bool = False) -> None:
    """Add ``--registry PATH``; ``legacy_root``: also take the deprecated positional ROOT."""
    p.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    if legacy_root:
        p.add_argument("root", nargs="?", default=None, metavar="ROOT", help=argparse.SUPPRESS)


def is_registry(path: Path) -> bool:
    """True for a folder holding a registry (its ``manifests/`` folder)."""
    return (path / "manifests").is_dir()


def find_run(path: str | Path) -> Path | None:
    """The ``mmgrid-run.yaml`` of a run folder, or of the run a registry folder belongs to
    (its parent folder's, when that file names this registry); None if there is none."""
    from mmgrid.config import runfile  # lazy: yaml (~0.05 s) stays out of `mmgrid --help`

    return runfile.find_run(path)


def _run_registry(run_file: Path) -> Path:
    """The registry of a saved run, checked (missing, not a registry, a loop: named errors)."""
    from mmgrid.config import runfile  # lazy: as above

    run = runfile.read_run(run_file)
    for text in run.notes:
        note(text)
    return runfile.run_registry(run)


def _as_registry(path: str, where: str) -> Path:
    """A registry folder from ``path`` (a registry, or a run folder naming one)."""
    p = Path(path)
    if is_registry(p):
        return p
    run = find_run(p)
    if run is not None:
        return _run_registry(run)
    raise RegistryError(f"{path} ({where}) is not a registry (no manifests/ folder) and holds no {RUN_FILE}; "
                        f"pass --registry with a registry folder or a run folder (as `mmgrid demo --out` writes).")


def registry_path(args: argparse.Namespace, command: str, *, must_exist: bool = True) -> Path:
    """The registry a command works on, by the rule of this module's docstring.

    Raises:
        RegistryError: no registry found (naming every place looked), or the one named is none.
    """
    root = getattr(args, "root", None)
    flag = getattr(args, "registry", None)
    if root is not None:
        if flag is not None and Path(flag) != Path(root):
            raise RegistryError(f"mmgrid {command}: ROOT {root} and --registry {flag} name two registries; give one.")
        note(f"`mmgrid {command} ROOT` is deprecated; write `mmgrid {command} --registry {root}` (or set {ENV}).")
        flag = root
    if flag is not None:
        path = _as_registry(flag, "--registry") if must_exist or find_run(flag) else Path(flag)
        return path
    env = os.environ.get(ENV)
    if env:
        return _as_registry(env, f"${ENV}") if must_exist else Path(env)
    here = Path(RUN_FILE)
    if here.is_file():
        return _run_registry(here)
    if is_registry(DEMO_RUN / "registry"):
        return DEMO_RUN / "registry"
    raise RegistryError(f"mmgrid {command}: which registry? pass --registry PATH (a registry or run folder), "
                        f"set {ENV}, or run it in a run folder (one with {RUN_FILE}).")
