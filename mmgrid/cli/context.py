"""What a command opens before it works: the grid it runs on, its registry, the prepared data,
and the check of the one against the other. The one entry-layer module that loads a run or a
grid (:func:`load_config`, :func:`load_source`), saves one (:func:`save_run`), checks a config
against a registry (:func:`check_against_registry`) and opens a study's inputs
(:func:`open_study`) or an evaluation's (:func:`eval_config`, :func:`eval_prepared`); the
grammar of naming a registry or a run is :mod:`mmgrid.cliargs`, below every layer that uses it.

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

Every import of a heavy library (the registry, the validation pass, the studies) sits inside
the function that needs it, so that `mmgrid --help`, which imports every command module and
through them this one, loads none of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.cliargs import RUN_FILE, find_run, is_registry, note, registry_path
from mmgrid.errors import ConfigError, MmgridError, RegistryError
from mmgrid.fileio.atomic import atomic_write

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry


def open_registry(args: argparse.Namespace, command: str, *, quiet: bool = False, create: bool = False) -> Registry:
    """Open the command's registry, named by the one rule of :mod:`mmgrid.cliargs`; ``create``:
    make it when missing (``registry import-hf``), else never create one; ``quiet``: no warning for
    the files the index skips (the command lists them itself)."""
    # lazy: sqlite3 and the registry (~0.1 s) stay out of `mmgrid --help`
    from mmgrid.registry.api import Registry
    from mmgrid.registry.errors import RegistryWarning

    path = registry_path(args, command, must_exist=not create)
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
    atomic_write(target, (head + yaml.safe_dump(run_dict(cfg, folder), sort_keys=False)).encode(), durable=False)
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
    registry, the one given wins: the grid's ``registry`` is set to that path (as a path, never
    through a ``registry=`` override), unless a ``registry=`` override is given.
    """
    # lazy: the validation pass (names of every registry) stays out of `mmgrid --help`
    from mmgrid.validate import validate_grid

    extra = list(overrides or [])
    if target is not None and "=" in target and not Path(target).exists():  # `mmgrid sweep temporal KEY=VALUE`
        extra = [target, *extra]
        target = None
    given = None
    if args is not None and target is not None and (getattr(args, "registry", None) or getattr(args, "root", None)):
        given = registry_path(args, command)
        if any(o.split("=", 1)[0].strip() == "registry" for o in extra):
            given = None
    cfg = load_source(grid_source(target, args, command), extra)
    if given is not None:
        cfg = dataclasses.replace(cfg, registry=str(given))
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


# -- what a study opens ---------------------------------------------------------------------------

def open_study(args: argparse.Namespace) -> tuple[GridConfig, Registry, PreparedDataset]:
    """(GridConfig, Registry, PreparedDataset) of a study command's grid (``sweep ...``,
    ``predict-lambda``, ``report``), after the one validation pass, the preflight of a sweep and,
    for a study, the check of the config against the registry (before any work)."""
    # lazy: the registry, the prepared data and the studies (torch ~3.5 s, pandas ~0.8 s) stay out of
    # `mmgrid --help`
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.temporal import periods

    top = getattr(args, "command", None) or "sweep"  # the sub-command's name (the parser's dest)
    command = (getattr(args, "study", None) or "sweep") if top == "sweep" else top
    cfg = load_config(args.config, args.overrides, args if hasattr(args, "registry") else None, command=command)
    metric = getattr(args, "metric", None)
    if metric is not None and metric not in cfg.metric_names():  # before any work: the table would be empty
        raise ConfigError(f"mmgrid {top} {command} --metric {metric!r}: not a recorded metric; known (from eval.ks): "
                          f"{', '.join(cfg.metric_names())}.")
    if top == "sweep":  # models, devices and Ray before any merge (nothing trains: no disk or size checks)
        from mmgrid.runtime.preflight import preflight  # lazy: torch (~1-3.5 s), as the imports above

        preflight(cfg, f"sweep {command}", executor=getattr(args, "executor", None),
                  address=getattr(args, "address", None), skip=("disk", "sizes"))
    prepared = load_prepared(cfg.prepared_dir)
    if not is_registry(Path(cfg.registry_root)):
        raise RegistryError(f"mmgrid {command}: {cfg.registry} is not a registry (no manifests/ folder); build the "
                            f"grid first (`mmgrid build CONFIG` or `mmgrid demo`) or pass --registry PATH.")
    reg = Registry.open(cfg.registry_root)
    t = cfg.sweeps.temporal
    study = {"temporal": ([t.paradigm], t.variant, t.domains),
             "predict-lambda": ([t.paradigm], t.variant, t.domains),
             "continual": ([t.paradigm], t.variant, t.domains),
             "rolling": ([t.paradigm], t.variant, t.domains),
             "cross-domain": (list(cfg.sweeps.cross_domain.paradigms), cfg.sweeps.cross_domain.variant, None)}
    if command in study:
        paradigms, variant, domains = study[command]
        unknown = [d for d in (domains or []) if d not in prepared.domains]
        if unknown:  # before the registry is compared: a domain the data lacks is no checkpoint to build
            raise ConfigError(f"sweeps.temporal.domains: {unknown} are not domains of the prepared data {cfg.prepared} "
                              f"(it holds {list(prepared.domains)}); name some of those or leave the key out (every "
                              "domain).")
        check_against_registry(cfg, reg, paradigms, [variant], list(domains or prepared.domains),
                               list(cfg.train.stages) if command == "rolling" else list(periods(cfg)),
                               command=f"{'sweep ' if command != 'predict-lambda' else ''}{command}",
                               fingerprint=_fingerprints(prepared))
    return cfg, reg, prepared


def _fingerprints(prepared: Any) -> tuple[str, ...] | None:
    """The prepared data's content fingerprint, then the path-spelled one that checkpoints stored
    under an earlier identity recorded (either names this data)."""
    fp = getattr(prepared, "fingerprint", None)
    if fp is None:
        return None
    old = getattr(prepared, "path_fingerprint", None)
    return (fp, old) if old and old != fp else (fp,)


# -- what an evaluation opens ---------------------------------------------------------------------

def eval_config(args: argparse.Namespace, registry: Path | None = None) -> Any:
    """The grid config giving paradigm params and eval settings, with the command's KEY=VALUE
    overrides applied (never ignored): ``--config``, else the saved run of ``registry``
    (``mmgrid-run.yaml`` beside it), else the defaults; through the one validation pass.
    ``args.from_run`` says which was used."""
    # lazy: yaml, the config and the validation pass (torch) stay out of `mmgrid --help`
    from mmgrid.config import GridConfig
    from mmgrid.configtools import apply_overrides, build
    from mmgrid.validate import validate_grid

    source = args.config or (str(find_run(registry)) if registry is not None and find_run(registry) else None)
    args.from_run = source is not None
    if source is not None:
        return load_config(source, args.overrides, command="eval")
    cfg = build(GridConfig, apply_overrides({"name": "eval"}, args.overrides), where="KEY=VALUE")
    validate_grid(cfg)
    return cfg


def eval_prepared(args: argparse.Namespace, cfg: GridConfig, man: Any = None) -> Any:
    """The prepared data: ``--prepared``, else the ``--config`` grid's, else (a checkpoint of a
    registry, no config) the prepared folder beside the registry (``mmgrid demo`` and grids
    write ``runs/NAME/prepared`` next to ``runs/NAME/registry``) when its fingerprint is the one
    the checkpoint was trained on."""
    # lazy: the prepared data's reader (pyarrow) stays out of `mmgrid --help`
    from mmgrid.runtime.context import open_prepared

    if not args.prepared and not getattr(args, "from_run", False) and args.registry and man is not None:
        beside = registry_path(args, "eval").parent / "prepared"
        want = getattr(man, "data_fingerprint", None)
        try:
            found = open_prepared(beside)
        except MmgridError:
            found = None
        if found is not None and (want is None or found.fingerprint == want):
            return found
        where = f"{beside} holds data {found.fingerprint}" if found is not None else f"there is no prepared data at {beside}"
        raise ConfigError(f"checkpoint {man.id[:12]} was trained on prepared data {want}, and {where}; pass "
                          "--prepared DIR (the grid's `prepared:` folder) or --config CONFIG (the grid YAML).")
    path = args.prepared or cfg.prepared_dir
    try:
        return open_prepared(path)
    except MmgridError as exc:
        raise ConfigError(f"{exc} (pass --prepared DIR or --config CONFIG)") from exc


def evaluator_kwargs(cfg: GridConfig, split: str) -> dict[str, Any]:
    """The :class:`mmgrid.eval.ranking.Evaluator` settings of ``cfg``'s eval section for ``split``."""
    e = cfg.eval
    return {"split": split, "ks": e.ks, "groups": e.groups, "activity_phase": e.activity_phase,
            "max_users": e.max_users, "seed": cfg.train.seed}
