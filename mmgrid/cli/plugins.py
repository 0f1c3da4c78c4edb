"""``mmgrid plugins`` (what is registered and where it comes from) and ``mmgrid study NAME RUN``
(run a registered study): the entry layer of the extension points (:mod:`mmgrid.plugins`,
docs/extending.md). Each handler imports what it runs inside itself, so that ``mmgrid --help``
stays free of torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mmgrid.cli.context import load_config
from mmgrid.cliargs import REGISTRY_HELP, add_overrides, is_registry
from mmgrid.configtools import parse_override
from mmgrid.errors import ConfigError, PluginError, RegistryError
from mmgrid.exec.args import add_executor_args, executor_from_args
from mmgrid.exec.base import LocalExecutor


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``plugins`` and ``study`` to the `mmgrid` parser."""
    p = sub.add_parser("plugins", help="list the registered merge methods, paradigms and studies and where each "
                                       "comes from (built-in, Python, an installed distribution)",
                       description="Every registered name of each extension point, with its source: built-in, "
                                   "registered from Python, or an installed distribution's entry point (groups "
                                   "mmgrid.merge_methods, mmgrid.paradigms, mmgrid.studies; docs/extending.md). "
                                   "Exit status 2 when a plugin fails to import or clashes (each is named).")
    p.add_argument("--kind", choices=["method", "paradigm", "study"], action="append", default=None,
                   help="list only this kind (repeatable; default: all three)")
    p.add_argument("--plugins-only", action="store_true", help="leave the built-in names out")
    p.set_defaults(func=_plugins)

    s = sub.add_parser("study", help="run a registered study (built-in or a plugin's) on a built grid",
                       description="Run study NAME (`mmgrid plugins --kind study` lists them) on a run folder, its "
                                   "registry or a grid YAML; it records its results in the registry and prints "
                                   "what its renderer makes of them. The built-in studies are also `mmgrid sweep` "
                                   "commands with more options.")
    s.add_argument("name", metavar="NAME", help="the study's registered name")
    s.add_argument("config", nargs="?", default=None, metavar="RUN|CONFIG",
                   help="a run folder (with mmgrid-run.yaml) or its registry, a grid YAML, or a packaged grid name")
    s.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    s.add_argument("--set", dest="params", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of the study (its own; the grid's settings are KEY=VALUE overrides)")
    add_overrides(s)
    add_executor_args(s)
    s.set_defaults(func=_study)


KINDS = {"method": "merge methods", "paradigm": "paradigms", "study": "studies"}


def _tables() -> dict[str, Any]:
    """The three tables, each with its built-in names loaded."""
    # lazy: the method and paradigm modules import torch (~1-3.5 s); `mmgrid --help` must not pay it
    from mmgrid.merge.methods import METHODS
    from mmgrid.paradigms import paradigm_names
    from mmgrid.paradigms.registration import PARADIGMS
    from mmgrid.sweep.studies import STUDIES

    try:
        paradigm_names()  # every built-in paradigm module imported (and with it every paradigm plugin)
    except PluginError:
        pass  # listed below, with the other failures
    return {"method": METHODS, "paradigm": PARADIGMS, "study": STUDIES}


def _plugins(args: argparse.Namespace) -> int:
    tables = _tables()
    failed: list[str] = []
    for kind in args.kind or list(KINDS):
        table = tables[kind]
        broken = table.failures()
        failed += [str(exc) for _, exc in broken]
        every = table.entries(load=False)
        entries = [e for e in every if not (args.plugins_only and e.source.kind == "built-in")]
        n_builtin = sum(e.source.kind == "built-in" for e in every)
        print(f"{KINDS[kind]} ({n_builtin} built-in, {len(every) - n_builtin} other; entry-point group {table.group}):")
        width = max([len(e.name) for e in entries], default=0)
        for e in entries:
            about = getattr(e.obj, "help", "") if kind == "study" else ""  # a Study record says what it runs
            print(f"  {e.name:<{width}}  {e.source}" + (f"  ({about})" if about else ""))
        for point, _ in broken:
            print(f"  {point}  FAILS (see below)")
    for msg in failed:
        print(f"mmgrid: error: {msg}", file=sys.stderr)
    return 2 if failed else 0


def _study(args: argparse.Namespace) -> int:
    # lazy: the study table, the data and the registry import pandas and torch (~1-3.5 s)
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.studies import StudyOptions, get_study, run_study

    get_study(args.name)  # an unknown name fails before anything is opened
    params = {}
    for text in args.params:
        try:
            path, value = parse_override(text)
        except ConfigError as exc:
            raise ConfigError(f"mmgrid study --set {text!r}: {exc}") from exc
        params[".".join(path)] = value
    cfg = load_config(args.config, args.overrides, args, command=f"study {args.name}")
    if not is_registry(Path(cfg.registry_root)):
        raise RegistryError(f"mmgrid study {args.name}: {cfg.registry_root} is not a registry (no manifests/ folder); "
                            "build the grid first (`mmgrid build CONFIG` or `mmgrid demo`) or pass --registry PATH.")
    executor = executor_from_args(args, cfg)
    reg = Registry.open(cfg.registry_root)
    try:
        options = StudyOptions(load_prepared(cfg.prepared_dir), None if isinstance(executor, LocalExecutor) else executor,
                               params)
        _, text = run_study(args.name, cfg, reg, options)
    finally:
        executor.shutdown()
        reg.close()
    print(text)
    return 0
