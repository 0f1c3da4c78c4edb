"""The one command-line grammar every ``mmgrid`` command shares.

Naming a registry (``--registry``): every command that reads or writes a registry finds it the
same way, first match wins:

1. ``--registry PATH``: a registry folder, or a *run folder* (one holding ``mmgrid-run.yaml``,
   which names its registry);
2. ``$MMGRID_REGISTRY`` (the same two forms);
3. the run in the current folder (``./mmgrid-run.yaml``);
4. ``./runs/demo`` when ``mmgrid demo`` wrote it there.

A positional ``ROOT`` still works where older versions took one (``mmgrid query ROOT``) and
prints a deprecation note naming the new spelling.

A run remembers itself: every command that writes an output folder (``demo``, ``build``,
``report --out``) saves the resolved grid there as ``mmgrid-run.yaml`` (:func:`save_run`), its
paths relative to that folder (:mod:`mmgrid.config.runfile`: a moved or copied run reads and
writes only its own registry; a registry that is missing, is not one, loops or leaves the run
unannounced is a named error). ``report --out`` never replaces a saved run of another grid.
Follow-ups (``sweep``, ``eval``, ``predict-lambda``, ``report``, ``merge``) accept that folder
or its registry in place of a grid YAML (:func:`load_config`) and apply only the
``KEY=VALUE`` overrides given; :func:`check_against_registry` then compares the config with
what the registry holds (seeds, variants, stages, domains, the training knobs each checkpoint
was trained with, the data fingerprint) before any work and names each mismatch with its fix.

This module sits below ``mmgrid.cli`` so that command modules never import back from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.errors import ConfigError, RegistryError

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.registry.api import Registry

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


def open_registry(args: argparse.Namespace, command: str, quiet: bool = False) -> Registry:
    """Open the command's registry (never creating one); ``quiet``: no warning for the files the
    index skips (the command lists them itself)."""
    # lazy: sqlite3 and the registry (~0.1 s) stay out of `mmgrid --help`
    from mmgrid.registry.api import Registry
    from mmgrid.registry.errors import RegistryWarning

    path = registry_path(args, command)
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", RegistryWarning)
        return Registry.open(path)


# -- a run remembers itself ---------------------------------------------------------------------

def save_run(cfg: GridConfig, folder: str | Path, command: str) -> Path:
    """Write ``folder/mmgrid-run.yaml``: the resolved grid, its paths relative to ``folder``
    (absolute where they lie outside it, listed in ``run.external``: :mod:`mmgrid.config.runfile`),
    so that a follow-up command can name the folder instead of repeating the grid and its
    overrides, and the folder still works after ``mv`` or ``cp -a``. Written atomically (a reader
    sees the old file or the new one); when it replaces a saved grid that differs, a note names
    the keys that changed."""
    # lazy: yaml and the config stay out of `mmgrid --help`
    import yaml
    from mmgrid.config import GridConfig
    from mmgrid.config.runfile import run_dict

    assert isinstance(cfg, GridConfig)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    changed = run_changes(cfg, folder)
    if changed:
        note(f"{folder / RUN_FILE}: the saved grid now records this `mmgrid {command}`'s " + "; ".join(changed[:6])
             + (f" and {len(changed) - 6} more" if len(changed) > 6 else "") + ".")
    target = folder / RUN_FILE
    head = (f"# The resolved grid of `mmgrid {command}` (grid hash {cfg.hash()}); paths are relative to this folder.\n"
            f"# Follow-ups take this folder in place of a grid YAML, e.g. `mmgrid sweep temporal {folder}`.\n")
    tmp = target.with_name(f".{RUN_FILE}.{os.getpid()}.tmp")
    tmp.write_text(head + yaml.safe_dump(run_dict(cfg, folder), sort_keys=False))
    os.replace(tmp, target)
    return target


def run_changes(cfg: GridConfig, folder: str | Path) -> list[str]:
    """The keys (``KEY: saved -> new``) where ``folder``'s saved run differs from ``cfg``, paths
    compared once resolved; empty when the folder holds no run file or the same grid."""
    from mmgrid.config.runfile import load_run, run_dict  # lazy: yaml stays out of `mmgrid --help`

    target = Path(folder) / RUN_FILE
    if not target.is_file():
        return []
    try:
        old = run_dict(load_run(target), folder)
    except (ConfigError, RegistryError):
        return ["the saved grid (unreadable before)"]
    new = run_dict(cfg, folder)
    out: list[str] = []

    def walk(a: Any, b: Any, key: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                walk(a.get(k), b.get(k), f"{key}.{k}" if key else str(k))
        elif a != b:
            out.append(f"{key}: {a!r} -> {b!r}")

    walk(old, new, "")
    return out


def load_source(source: str | Path, overrides: list[str] | None = None) -> GridConfig:
    """The grid of ``source``: a saved run (``mmgrid-run.yaml``, its paths relative to its folder)
    or a grid YAML / packaged grid name, with ``overrides`` applied (not validated)."""
    # lazy: yaml and the config stay out of `mmgrid --help`
    from mmgrid.config import load_grid
    from mmgrid.config.runfile import is_run_file, load_run

    if not is_run_file(source):
        return load_grid(source, overrides)
    notes: list[str] = []
    cfg = load_run(source, overrides, notes)
    for text in notes:
        note(text)
    return cfg


def grid_source(target: str | None, args: argparse.Namespace | None = None, command: str = "") -> str:
    """What to load a grid from: ``target`` as given (a YAML or packaged name), the saved run
    of a run folder or registry folder, or (no target) the run of the command's registry."""
    if target is not None and Path(target).is_dir():
        run = find_run(target)
        if run is None:
            raise ConfigError(f"{target} is a folder without {RUN_FILE} (and not the registry of a saved run); "
                              "pass a grid YAML, a packaged grid name such as demo, or a run folder.")
        return str(run)
    if target is not None:
        return target
    if args is not None:
        try:
            reg = registry_path(args, command)
        except RegistryError as exc:
            raise ConfigError(f"mmgrid {command}: no grid given and {exc}") from exc
        run = find_run(reg)
        if run is not None:
            return str(run)
        raise ConfigError(f"mmgrid {command}: no grid given and the registry {reg} has no saved run "
                          f"({RUN_FILE} beside it); pass the grid YAML the registry was built with.")
    raise ConfigError(f"mmgrid {command}: give a grid YAML, a packaged grid name or a run folder.")


def load_config(target: str | None, overrides: list[str] | None, args: argparse.Namespace | None = None,
                command: str = "") -> GridConfig:
    """The grid of ``target`` (see :func:`grid_source`) with ``overrides`` applied, validated once.

    When ``args`` has ``--registry`` (or the environment names one) and the grid names another
    registry, the one given wins: ``registry=`` is set to it.
    """
    # lazy: the validation pass (names of every registry) stays out of `mmgrid --help`
    from mmgrid.validate import validate_grid

    extra = list(overrides or [])
    if target is not None and "=" in target and not Path(target).exists():  # `mmgrid sweep temporal KEY=VALUE`
        extra = [target, *extra]
        target = None
    if args is not None and target is not None and (getattr(args, "registry", None) or getattr(args, "root", None)):
        reg = registry_path(args, command)
        if not any(o.split("=", 1)[0].strip() == "registry" for o in extra):
            extra.append(f"registry={reg}")
    cfg = load_source(grid_source(target, args, command), extra)
    validate_grid(cfg)
    return cfg


def check_against_registry(cfg: GridConfig, reg: Registry, paradigms: list[str], variants: list[str] | None = None,
                           domains: list[str] | None = None, stages: list[str] | None = None,
                           command: str = "", fingerprint: str | tuple[str, ...] | None = None) -> None:
    """Compare what a study will look up with what the registry holds, before any work.

    For each paradigm, variant, domain and stage (default ``cfg.train.stages``) the registry must hold
    a trained checkpoint of every seed ``cfg.train.seeds`` names (a shared stage: of the first
    seed), trained with the knobs the config gives (``train.lr``, ``train.epochs``, the variant's
    regularizer, ``paradigm_params``...: see :func:`_training_mismatches`; paths never count). With ``fingerprint`` (the prepared dataset's), the checkpoints must have been trained
    on that data. Every mismatch is named with its fix in one error.

    Raises:
        ConfigError: listing each mismatch (what the config says, what the registry holds, the fix).
    """
    df = reg.query(kind="trained")
    if df.empty:
        raise ConfigError(f"mmgrid {command}: the registry {reg.root} holds no trained checkpoint; "
                          f"run `mmgrid build` (or `mmgrid demo`) first.")
    seeds = list(cfg.train.seed_list)
    shared = set(getattr(cfg.train, "shared_stages", []) or [])
    variants = variants or [v.name for v in cfg.variants]
    problems: list[str] = []
    held_paradigms = sorted(set(df["paradigm"].dropna()))
    for par in paradigms:
        if par not in held_paradigms:
            problems.append(f"paradigm {par!r}: the registry holds none (it holds {held_paradigms}); "
                            f"drop it from the study or run `mmgrid build` with it in `paradigms`.")
            continue
        sub = df[df["paradigm"] == par]
        held_variants = sorted(set(sub["variant"].dropna()))
        for var in variants:
            vs = sub[sub["variant"] == var]
            if vs.empty:
                problems.append(f"{par}: variant {var!r} is not in the registry (it holds {held_variants}); "
                                f"pick one of those, or build it.")
                continue
            for dom in domains or sorted(set(vs["domain"].dropna())):
                ds = vs[vs["domain"] == dom]
                for stage in stages or cfg.train.stages:
                    want = seeds[:1] if stage in shared else seeds
                    have = sorted({int(s) for s in ds[ds["period"] == stage]["seed"].dropna()})
                    missing = [s for s in want if s not in have]
                    if missing:
                        fix = (f"pass train.seeds=[{','.join(map(str, have))}]" if have else
                               f"build it (`mmgrid build RUN train.stages=...`) or drop stage {stage!r}")
                        problems.append(f"{par}/{var}/{dom}/{stage}: train.seeds names {want}, the registry holds "
                                        f"seeds {have}; {fix}, or run `mmgrid build` with these seeds first.")
    problems += _training_mismatches(cfg, reg, df, paradigms, variants, stages or list(cfg.train.stages))
    if fingerprint is not None and paradigms:
        # a tuple: the prepared data's fingerprints (today's content one, then the path-spelled one of earlier ids)
        fps = (fingerprint,) if isinstance(fingerprint, str) else tuple(fingerprint)
        fingerprint = fps[0]
        held = {fp for cid in df[df["paradigm"].isin(paradigms)]["id"].head(20)
                if (fp := reg.get(cid).data_fingerprint) is not None}
        if held and not held & set(fps):
            problems.insert(0, f"the prepared data ({cfg.prepared}, fingerprint {fingerprint}) is not the data the "
                               f"registry's checkpoints were trained on ({', '.join(sorted(held))}); pass prepared=DIR "
                               "of the run that built them (its mmgrid-run.yaml names it).")
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise ConfigError(f"mmgrid {command}: the config does not match the registry {reg.root} "
                          f"({len(problems)} mismatches); nothing was run:\n  " + "\n  ".join(shown))


# What a stage's params (mmgrid.runtime.plan.stage_params, stored in every trained manifest) are
# called in the grid YAML, to name a mismatch by the key a user would pass.
_PARAM_KEYS = {"lr": "train.lr", "weight_decay": "train.weight_decay", "batch_size": "train.batch_size",
               "max_examples": "train.max_examples"}


def _param_key(name: str, sub: str | None, paradigm: str, variant: str, stage: str) -> str:
    """The grid key behind one entry of a stage's params (``sub``: a key inside a dict entry)."""
    if name in _PARAM_KEYS:
        return _PARAM_KEYS[name]
    if name == "epochs":
        return f"train.epochs.{stage}"
    if name == "regularizer":
        return f"variants[{variant}].regularizer"
    if name == "regularizer_params":
        return f"variants[{variant}].params.{sub}"
    if name == "paradigm_params":
        return f"paradigm_params.{paradigm}.{sub}"
    return name


def _flat_params(params: dict[str, Any]) -> dict[tuple[str, str | None], Any]:
    out: dict[tuple[str, str | None], Any] = {}
    for k, v in params.items():
        if isinstance(v, dict):
            for sk, sv in v.items():
                out[(k, sk)] = sv
        else:
            out[(k, None)] = v
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    return a == b


def _training_mismatches(cfg: GridConfig, reg: Registry, df: Any, paradigms: list[str], variants: list[str],
                         stages: list[str]) -> list[str]:
    """The training knobs where the config and the registry's checkpoints disagree.

    Each trained manifest stores the parameters its stage was trained with
    (:func:`mmgrid.runtime.plan.stage_params`: epochs, lr, weight decay, batch size, example cap,
    regularizer and its params, paradigm params, the paradigm's training version). The config's
    own stage params are computed the same way and compared field by field with one checkpoint
    per (paradigm, variant, stage); a mismatch means the study would look up checkpoints the
    config does not describe (or none at all). Paths (``data.root``, ``prepared``,
    ``registry``) are not training knobs and are never compared: the manifest's ``config_hash``
    covers ``data.root``'s spelling, so it is not compared either; the data itself is checked
    by its fingerprint.
    """
    # lazy: the runtime layer (paradigm registry) stays out of `mmgrid --help`
    from mmgrid.paradigms.params import training_params
    from mmgrid.runtime.plan import stage_params

    by_name = {v.name: v for v in cfg.variants}
    problems: list[str] = []
    seen: set[str] = set()
    for par in paradigms:
        for var in variants:
            if var not in by_name:
                continue
            for stage in stages:
                if stage not in cfg.train.epochs:
                    continue
                rows = df[(df["paradigm"] == par) & (df["variant"] == var) & (df["period"] == stage)]
                if rows.empty:
                    continue
                # through JSON, as the manifest stored them (tuples become lists)
                want = _flat_params(json.loads(json.dumps(stage_params(cfg, by_name[var], par, stage), default=str)))
                params = dict(reg.get(rows["id"].iloc[0]).params)
                # a checkpoint stored under an earlier identity also recorded knobs read only at evaluation
                params["paradigm_params"] = training_params(par, params.get("paradigm_params"))
                held = _flat_params(params)
                for key in sorted(set(held) | set(want), key=str):
                    if key == ("stage", None) or _same(held.get(key), want.get(key)):
                        continue
                    name = _param_key(key[0], key[1], par, var, stage)
                    if key[0] == "train_version":
                        line = (f"{par}: the registry's checkpoints were trained by training version "
                                f"{held.get(key, 1)}, this mmgrid trains version {want.get(key, 1)}; rebuild them "
                                "(`mmgrid build RUN`) to compare like with like.")
                    elif key not in held or key not in want:
                        line = (f"{name}: the config {'sets' if key in want else 'does not set'} it"
                                f"{f' ({want[key]!r})' if key in want else ''}, the registry's {par}/{var}/{stage} "
                                f"checkpoints were trained {'without it' if key in want else f'with {held[key]!r}'}; "
                                f"{f'drop {name}' if key in want else f'pass {name}={held[key]!r}'} to match them.")
                    else:
                        line = (f"{name}: the config says {want[key]!r}, the registry's {par}/{var}/{stage} "
                                f"checkpoints were trained with {held[key]!r}; pass {name}={held[key]!r} "
                                "(or rebuild with `mmgrid build RUN` to train the new value).")
                    if line not in seen:
                        seen.add(line)
                        problems.append(line)
    # one line per key: a knob that differs in every stage (train.lr) is named once
    out: list[str] = []
    keys: set[str] = set()
    for line in problems:
        k = line.split(":", 1)[0]
        if k not in keys or k.startswith("train.epochs"):
            keys.add(k)
            out.append(line)
    return out
