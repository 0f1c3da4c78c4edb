"""CLI sub-command ``mmgrid merge`` (the merge itself is :mod:`mmgrid.merge`).

``mmgrid merge --method NAME --base ID --inputs ID ID ... [--set key=value ...]
--registry ROOT [--out-coords key=value ...] [--dry-run]`` or ``--recipe FILE.yaml``;
prints the new checkpoint id. ``mmgrid merge --mergekit RECIPE.yml --out DIR`` runs a
mergekit recipe into an HF folder (or, with ``--registry`` and no ``--out``, into the
registry) and prints the folder or the id.
"""

from __future__ import annotations

import argparse

from mmgrid.cliargs import REGISTRY_HELP, registry_path
from mmgrid.configtools import parse_override
from mmgrid.merge.errors import MergeParamError


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    p = sub.add_parser(
        "merge",
        help="merge checkpoints of the registry and store the result (prints its id)",
        description="Merge registry checkpoints with a named method; the result is stored with "
        "lineage edges (merge_input, merge_base). Methods: average, task_arithmetic, ties, dare, "
        "ties_dare, temporal, orthomerge, gcwm, slerp, nuslerp, multislerp, karcher, model_stock, nearswap, "
        "passthrough, breadcrumbs, breadcrumbs_ties, della, della_linear, sce, ram, ramplus_tl, arcee_fusion; "
        "continual merges over inputs in arrival order: magmax, opcm, dop; fusers of checkpoints in time order: "
        "linear_velocity, moving_average_velocity, acceleration, exp_decay, ema (see docs/merging.md).",
    )
    p.add_argument("--method", help="merge method name")
    p.add_argument("--inputs", nargs="+", metavar="ID", help="input checkpoint ids, in order")
    p.add_argument("--base", nargs="+", metavar="ID", help="base id; two or more ids = neutral base (their average, MMGRid Eq. 8)")
    p.add_argument("--set", dest="params", action="append", default=[], metavar="KEY=VALUE",
                   help="method parameter, e.g. --set density=0.2 --set weights=[0.5,0.5]")
    p.add_argument("--seed", type=int, default=0, help="seed (DARE masks)")
    p.add_argument("--recipe", metavar="FILE.yaml", help="read method, inputs, base, params, seed from a recipe")
    p.add_argument("--mergekit", metavar="RECIPE.yml",
                   help="run a mergekit YAML recipe (models: HF folders, or registry ids with --registry)")
    p.add_argument("--out", metavar="DIR", help="with --mergekit: write the result as an HF folder here")
    p.add_argument("--overwrite", action="store_true", help="with --mergekit --out: replace an existing folder")
    p.add_argument("--max-shard-size", type=float, default=5.0, metavar="GB",
                   help="with --mergekit --out: shard the weights above this many GB (default 5, as save_pretrained)")
    p.add_argument("--registry", metavar="PATH", help="the registry the inputs are in and the result goes to; " + REGISTRY_HELP)
    p.add_argument("--out-coords", nargs="*", default=[], metavar="KEY=VALUE",
                   help="coords of the result (default: inputs' paradigm, joined domains/periods, variant merge-METHOD)")
    p.add_argument("--dry-run", action="store_true", help="validate and print the id without merging")
    p.set_defaults(func=_run)


def _parse_pairs(items: list[str], what: str) -> dict:
    out = {}
    for text in items:
        try:
            path, value = parse_override(text)
        except Exception as exc:
            raise MergeParamError(f"{what} {text!r}: {exc}") from exc
        out[".".join(path)] = value
    return out


def _run(args: argparse.Namespace) -> int:
    # lazy: a recipe imports torch (4.5 s cold, measured), which `mmgrid --help` must not pay
    from mmgrid.merge.recipe import Recipe, read_recipe, run_recipe
    from mmgrid.registry import Registry

    if args.mergekit:
        return _run_mergekit(args)
    if args.out:
        raise MergeParamError("--out writes an HF folder for --mergekit recipes; registry merges print an id instead")
    # validated once, before anything is opened; the merge takes the checked parameters as they are
    if args.recipe:
        recipe = read_recipe(args.recipe)
    else:
        if not args.method or not args.inputs:
            raise MergeParamError("give --method and --inputs (or --recipe FILE.yaml)")
        base = None if not args.base else (args.base[0] if len(args.base) == 1 else list(args.base))
        recipe = Recipe(args.method, list(args.inputs), base, _parse_pairs(args.params, "--set"), args.seed).checked()
    reg = Registry.open(registry_path(args, "merge"))
    if not args.dry_run:
        reg.require_writable("`mmgrid merge`")  # before the merge's work, not after it
    coords = _parse_pairs(args.out_coords, "--out-coords") or None
    print(run_recipe(recipe, reg, coords=coords, dry_run=args.dry_run))
    return 0


def _run_mergekit(args: argparse.Namespace) -> int:
    # lazy: the mergekit reader imports torch (4.5 s cold, measured), which `mmgrid --help` must not pay
    from mmgrid.merge.mergekit import run_mergekit_recipe
    from mmgrid.registry import Registry

    if args.recipe or args.method or args.inputs or args.base or args.params:
        raise MergeParamError("--mergekit takes everything from the recipe; drop --recipe/--method/--inputs/--base/--set")
    if not args.out and not args.registry:
        raise MergeParamError("--mergekit needs --out DIR (an HF folder) or --registry ROOT (a registry checkpoint)")
    if not 0 < args.max_shard_size < float("inf"):  # NaN and inf too (int(nan * 1e9) was a raw ValueError)
        raise MergeParamError(f"--max-shard-size {args.max_shard_size}: give a positive size in GB")
    reg = Registry.open(args.registry) if args.registry else None
    coords = _parse_pairs(args.out_coords, "--out-coords") or None
    res = run_mergekit_recipe(args.mergekit, args.out, reg, coords=coords, overwrite=args.overwrite,
                              max_shard_bytes=int(args.max_shard_size * 1e9), dry_run=args.dry_run)
    print(res.id if res.id else (res.out if res.out else "ok"))
    return 0
