"""CLI sub-commands of mmgrid.registry (see mmgrid/cli.py).

``mmgrid query ROOT``, ``mmgrid show ID``, ``mmgrid lineage ID``, ``mmgrid results ROOT``
and ``mmgrid registry verify|reindex|gc|alias ROOT``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from mmgrid.errors import RegistryError
from mmgrid.registry.errors import RegistryWarning

DEFAULT_ROOT = "./runs/demo/registry"
ROOT_HELP = f"registry folder (default: $MMGRID_REGISTRY, else {DEFAULT_ROOT})"


def _default_root() -> str:
    return os.environ.get("MMGRID_REGISTRY") or DEFAULT_ROOT


def _open(root: str, create: bool = False, quiet: bool = False):  # noqa: ANN202 - Registry imported lazily
    """Open a registry; ``quiet``: no warning for files the index skips (the command lists them)."""
    from mmgrid.registry.api import Registry  # lazy: sqlite3 and the registry (~0.1 s) stay out of `mmgrid --help`

    if not create and not (Path(root) / "manifests").is_dir():
        raise RegistryError(f"{root} is not a registry (no manifests/ folder); pass the right ROOT or --registry, or set MMGRID_REGISTRY.")
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", RegistryWarning)
        return Registry.open(root)


def _emit(df, fmt: str) -> None:  # noqa: ANN001
    if fmt == "csv":
        df.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        print(df.to_json(orient="records", indent=1))
    elif df.empty:
        print("(no rows)")
    else:
        import pandas as pd  # lazy: pandas (~0.5-1 s) stays out of `mmgrid --help`

        with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200,
                               "display.max_colwidth", 40):
            print(df.to_string(index=False))


def cmd_query(args: argparse.Namespace) -> int:
    reg = _open(args.root)
    filters = {k: getattr(args, k) for k in ("paradigm", "domain", "period", "kind", "variant", "seed")}
    df = reg.query(**filters)
    if args.format == "table":
        df = df.drop(columns=["params"])
    _emit(df, args.format)
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    reg = _open(args.root)
    filters = {k: getattr(args, k) for k in ("id", "paradigm", "domain", "period", "split", "group", "metric", "seed")}
    df = reg.results(**filters)
    if args.format == "table":
        df = df.drop(columns=["recipe", "key"])
    _emit(df, args.format)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    m = _open(args.registry).get(args.id)
    d = m.to_json()
    if not args.tensors:
        d["blobs"] = f"{len(m.blobs)} tensors, {m.nbytes / 1e6:.2f} MB (add --tensors to list them)"
    print(json.dumps(d, indent=1, sort_keys=True))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from mmgrid.registry.lineage import text_tree  # lazy: networkx (~0.3 s) stays out of `mmgrid --help`

    reg = _open(args.registry)
    cid = reg.resolve(args.id)
    print(text_tree(reg.lineage(cid), cid))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    report = _open(args.root, quiet=True).verify()
    print(report.summary())
    return 0 if report.ok else 1


def cmd_reindex(args: argparse.Namespace) -> int:
    reg = _open(args.root, quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegistryWarning)  # listed below instead
        n = reg.reindex()
    print(f"reindexed {reg.root}: {n} rows from manifests, aliases and results files")
    if reg.index_problems:
        print(f"SKIPPED {len(reg.index_problems)} unreadable files (not indexed; `mmgrid registry verify` lists "
              "them too; restore them from a backup or delete them):", file=sys.stderr)
        for path, problem in reg.index_problems:
            print(f"  {path}: {problem}", file=sys.stderr)
        return 1
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    report = _open(args.root).gc(keep=args.keep if args.keep else None, dry_run=args.dry_run, grace_s=args.grace)
    print(report.summary())
    return 0


def cmd_alias(args: argparse.Namespace) -> int:
    cid = _open(args.root).alias(args.name, args.id)
    print(f"{args.name} -> {cid}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    out = _open(args.root).export_hf(args.id, args.out)
    print(f"wrote {out} (open it with AutoModelForCausalLM.from_pretrained)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    coords = {"paradigm": args.paradigm, "domain": args.domain, "period": args.period, "variant": args.variant}
    cid = _open(args.root, create=True).import_hf(args.path, coords, expect_arch=args.expect_arch, like=args.like)
    print(cid)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    fmt = {"choices": ("table", "csv", "json"), "default": "table", "help": "output format (default table)"}
    q = sub.add_parser("query", help="list checkpoints of a registry, filtered by coords",
                       description="One row per checkpoint matching all given filters.")
    q.add_argument("root", metavar="ROOT", help="registry folder")
    for name in ("paradigm", "domain", "period", "kind", "variant"):
        q.add_argument(f"--{name}", default=None, help=f"only checkpoints with this {name}")
    q.add_argument("--seed", type=int, default=None, help="only checkpoints of this training seed (replicate)")
    q.add_argument("--format", **fmt)
    q.set_defaults(func=cmd_query)

    r = sub.add_parser("results", help="list recorded evaluation results of a registry")
    r.add_argument("root", metavar="ROOT", help="registry folder")
    for name in ("id", "paradigm", "domain", "period", "split", "group", "metric"):
        r.add_argument(f"--{name}", default=None, help=f"only rows with this {name}")
    r.add_argument("--seed", type=int, default=None, help="only rows of this training seed (replicate)")
    r.add_argument("--format", **fmt)
    r.set_defaults(func=cmd_results)

    s = sub.add_parser("show", help="print a checkpoint's manifest (id, id prefix or alias)")
    s.add_argument("id", metavar="ID", help="checkpoint id, unique id prefix (>= 6 digits) or alias")
    s.add_argument("--registry", default=_default_root(), metavar="ROOT", help=ROOT_HELP)
    s.add_argument("--tensors", action="store_true", help="list every tensor's blob, shape and dtype")
    s.set_defaults(func=cmd_show)

    ln = sub.add_parser("lineage", help="print a checkpoint's ancestors as a text tree")
    ln.add_argument("id", metavar="ID", help="checkpoint id, unique id prefix (>= 6 digits) or alias")
    ln.add_argument("--registry", default=_default_root(), metavar="ROOT", help=ROOT_HELP)
    ln.set_defaults(func=cmd_lineage)

    reg = sub.add_parser("registry", help="maintain a registry: verify, reindex, gc, alias, export-hf, import-hf")
    rs = reg.add_subparsers(dest="registry_command", metavar="ACTION", required=True)
    v = rs.add_parser("verify", help="re-hash every blob; report missing or corrupt ones (exit 1 if any)")
    v.add_argument("root", metavar="ROOT")
    v.set_defaults(func=cmd_verify)
    ri = rs.add_parser("reindex", help="rebuild index.sqlite from manifests, aliases and results files")
    ri.add_argument("root", metavar="ROOT")
    ri.set_defaults(func=cmd_reindex)
    g = rs.add_parser("gc", help="remove unreferenced blobs; with --keep also checkpoints nothing kept needs",
                      description="Without --keep: only blobs no manifest references. With --keep: keep those "
                                  "checkpoints, every aliased one and all their ancestors; remove the rest.")
    g.add_argument("root", metavar="ROOT")
    g.add_argument("--keep", nargs="*", default=None, metavar="REF", help="ids or aliases to keep (with ancestors)")
    g.add_argument("--dry-run", action="store_true", help="only report what would be removed")
    g.add_argument("--grace", type=float, default=3600.0, help="spare unreferenced blobs younger than this many seconds (default 3600)")
    g.set_defaults(func=cmd_gc)
    a = rs.add_parser("alias", help="point an alias at a checkpoint")
    a.add_argument("root", metavar="ROOT")
    a.add_argument("name", metavar="NAME")
    a.add_argument("id", metavar="ID")
    a.set_defaults(func=cmd_alias)
    e = rs.add_parser("export-hf", help="write a checkpoint as a Hugging Face folder (model.safetensors + config/tokenizer)")
    e.add_argument("root", metavar="ROOT")
    e.add_argument("id", metavar="ID", help="id, id prefix or alias")
    e.add_argument("out", metavar="OUT_DIR", help="new or empty folder")
    e.set_defaults(func=cmd_export)
    im = rs.add_parser("import-hf", help="bring in a Hugging Face folder (safetensors only; prints the id)")
    im.add_argument("root", metavar="ROOT")
    im.add_argument("path", metavar="HF_DIR")
    for name in ("paradigm", "domain", "period"):
        im.add_argument(f"--{name}", required=True, help=f"grid {name} of the imported checkpoint")
    im.add_argument("--variant", default="default")
    im.add_argument("--expect-arch", default=None, help="architecture or model_type config.json must name")
    im.add_argument("--like", default=None, metavar="REF", help="checkpoint whose tensor names and shapes must match")
    im.set_defaults(func=cmd_import)
