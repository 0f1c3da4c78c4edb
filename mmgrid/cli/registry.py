"""CLI sub-commands of the registry (:mod:`mmgrid.registry`).

``mmgrid query``, ``mmgrid show ID``, ``mmgrid lineage ID``, ``mmgrid results`` and ``mmgrid
registry verify|reindex|gc|alias|export-hf|import-hf|remap-ids``; each names its registry by the one rule of
:mod:`mmgrid.cliargs` (``--registry``, ``$MMGRID_REGISTRY``, the run in the current folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any
from pathlib import Path

from mmgrid.cli.context import load_config, open_registry
from mmgrid.cliargs import REGISTRY_HELP, add_overrides, add_registry
from mmgrid.errors import ConfigError
from mmgrid.registry.errors import RegistryWarning


def _select(df, columns: str | None, limit: int | None):  # noqa: ANN001, ANN202 - pandas imported lazily
    """Keep the ``--columns`` named (in that order) and the first ``--limit`` rows."""
    if columns:
        want = [c.strip() for c in columns.split(",") if c.strip()]
        unknown = [c for c in want if c not in df.columns]
        if unknown:
            raise ConfigError(f"--columns: {unknown} are not columns; the columns are {list(df.columns)}.")
        df = df[want]
    if limit is not None:
        df = df.head(limit)
    return df


def _check_unmatched(every, filters: dict, command: str) -> None:  # noqa: ANN001 - pandas imported lazily
    """An empty answer: refuse each filter whose value no row of ``every`` (the unfiltered frame) holds,
    naming the recorded values (:func:`mmgrid.registry.frames.unmatched_filters`)."""
    from mmgrid.registry.frames import unmatched_filters  # lazy: pandas, only on an empty answer

    bad = unmatched_filters(every, filters, lambda key, value: f"--{key} {value!r}")
    if bad:
        raise ConfigError(f"mmgrid {command}: " + "; ".join(bad) + ". Give a recorded value or leave the filter out.")


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


QUERY_FILTERS = ("paradigm", "domain", "period", "kind", "variant", "method")
RESULT_FILTERS = ("id", "paradigm", "domain", "period", "variant", "kind", "split", "group", "metric", "study")


def cmd_query(args: argparse.Namespace) -> int:
    reg = open_registry(args, "query")
    filters = {k: getattr(args, k) for k in (*QUERY_FILTERS, "seed")}
    df = reg.query(**filters)
    if df.empty:
        _check_unmatched(reg.query(), filters, "query")
    if args.format == "table" and not args.columns:
        df = df.drop(columns=["params"])
    _emit(_select(df, args.columns, args.limit), args.format)
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    reg = open_registry(args, "results")
    filters = {k: getattr(args, k) for k in (*RESULT_FILTERS, "seed")}
    df = reg.results(**filters)
    if df.empty:
        _check_unmatched(reg.results(), filters, "results")
    if args.format == "table" and not args.columns:
        df = df.drop(columns=[c for c in ("recipe", "key", "per_user", "extra") if c in df.columns])
    _emit(_select(df, args.columns, args.limit), args.format)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    m = open_registry(args, "show").get(args.id)
    d = m.to_json()
    if not args.tensors:
        d["blobs"] = f"{len(m.blobs)} tensors, {m.nbytes / 1e6:.2f} MB (add --tensors to list them)"
    print(json.dumps(d, indent=1, sort_keys=True))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from mmgrid.registry.lineage import text_tree  # lazy: networkx (~0.3 s) stays out of `mmgrid --help`

    reg = open_registry(args, "lineage")
    cid = reg.resolve(args.id)
    print(text_tree(reg.lineage(cid), cid))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    report = open_registry(args, "registry verify", quiet=True).verify()
    print(report.summary())
    return 0 if report.ok else 1


def cmd_reindex(args: argparse.Namespace) -> int:
    reg = open_registry(args, "registry reindex", quiet=True)
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


def cmd_remap(args: argparse.Namespace) -> int:
    # lazy: the grid plan pulls in the models and paradigms (torch, ~2-4 s)
    from mmgrid.runtime.context import open_prepared
    from mmgrid.runtime.context import open_registry as open_grid_registry
    from mmgrid.runtime.remap import remap_ids

    cfg = load_config(args.config, args.overrides, args if args.registry else None, command="registry remap-ids")
    rep = remap_ids(cfg, open_grid_registry(cfg.registry_root), open_prepared(cfg.prepared_dir), dry_run=args.dry_run)
    print("\n".join(rep.lines()))
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    report = open_registry(args, "registry gc").gc(keep=args.keep if args.keep else None, dry_run=args.dry_run, grace_s=args.grace)
    print(report.summary())
    return 0


def _legacy(args: argparse.Namespace, names: tuple[str, ...], command: str) -> None:
    """Spread ``args.items`` over ``names``; one item more is the deprecated leading ROOT."""
    items = list(args.items)
    if len(items) == len(names) + 1:
        args.root = items.pop(0)
    elif len(items) != len(names):
        raise ConfigError(f"mmgrid {command}: expected {' '.join(n.upper() for n in names)} "
                          f"(and --registry PATH), got {len(items)} arguments: {' '.join(items)}.")
    for n, v in zip(names, items):
        setattr(args, n, v)


def cmd_alias(args: argparse.Namespace) -> int:
    _legacy(args, ("name", "id"), "registry alias")
    cid = open_registry(args, "registry alias").alias(args.name, args.id)
    print(f"{args.name} -> {cid}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    _legacy(args, ("id", "out"), "registry export-hf")
    from mmgrid.registry.hf import loader_hint  # lazy: the export pulls in torch (~2-4 s)

    reg = open_registry(args, "registry export-hf")
    out = reg.export_hf(args.id, Path(args.out))
    print(f"wrote {out} ({loader_hint(reg.get(args.id))})")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    _legacy(args, ("path",), "registry import-hf")
    coords = {"paradigm": args.paradigm, "domain": args.domain, "period": args.period, "variant": args.variant}
    cid = open_registry(args, "registry import-hf", create=True).import_hf(args.path, coords, expect_arch=args.expect_arch, like=args.like)
    print(cid)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    fmt: dict[str, Any] = {"choices": ("table", "csv", "json"), "default": "table", "help": "output format (default table)"}
    sel: dict[str, dict[str, Any]] = {"columns": {"default": None, "metavar": "A,B,...", "help": "only these columns, in this order"},
           "limit": {"type": int, "default": None, "metavar": "N", "help": "only the first N rows"}}
    q = sub.add_parser("query", help="list checkpoints of a registry, filtered by coords",
                       description="One row per checkpoint matching all given filters. The registry: --registry, "
                                   "else $MMGRID_REGISTRY, else the run in the current folder.")
    add_registry(q, legacy_root=True)
    for name in QUERY_FILTERS:
        q.add_argument(f"--{name}", default=None, help=f"only checkpoints with this {name}")
    q.add_argument("--seed", type=int, default=None, help="only checkpoints of this training seed (replicate)")
    for name, kw in sel.items():
        q.add_argument(f"--{name}", **kw)
    q.add_argument("--format", **fmt)
    q.set_defaults(func=cmd_query)

    r = sub.add_parser("results", help="list recorded evaluation results of a registry",
                       description="One row per recorded metric value, filtered. The registry: --registry, "
                                   "else $MMGRID_REGISTRY, else the run in the current folder.")
    add_registry(r, legacy_root=True)
    for name in RESULT_FILTERS:
        r.add_argument(f"--{name}", default=None, help=f"only rows with this {name}")
    r.add_argument("--seed", type=int, default=None, help="only rows of this training seed (replicate)")
    for name, kw in sel.items():
        r.add_argument(f"--{name}", **kw)
    r.add_argument("--format", **fmt)
    r.set_defaults(func=cmd_results)

    s = sub.add_parser("show", help="print a checkpoint's manifest (id, id prefix or alias)")
    s.add_argument("id", metavar="ID", help="checkpoint id, unique id prefix (>= 6 digits) or alias")
    add_registry(s)
    s.add_argument("--tensors", action="store_true", help="list every tensor's blob, shape and dtype")
    s.set_defaults(func=cmd_show)

    ln = sub.add_parser("lineage", help="print a checkpoint's ancestors as a text tree")
    ln.add_argument("id", metavar="ID", help="checkpoint id, unique id prefix (>= 6 digits) or alias")
    add_registry(ln)
    ln.set_defaults(func=cmd_lineage)

    reg = sub.add_parser("registry", help="maintain a registry: verify, reindex, gc, alias, export-hf, import-hf, remap-ids")
    rs = reg.add_subparsers(dest="registry_command", metavar="ACTION", required=True)
    v = rs.add_parser("verify", help="re-hash every blob; report missing or corrupt ones (exit 1 if any)")
    add_registry(v, legacy_root=True)
    v.set_defaults(func=cmd_verify)
    ri = rs.add_parser("reindex", help="rebuild index.sqlite from manifests, aliases and results files")
    add_registry(ri, legacy_root=True)
    ri.set_defaults(func=cmd_reindex)
    g = rs.add_parser("gc", help="remove unreferenced blobs; with --keep also checkpoints nothing kept needs",
                      description="Without --keep: only blobs no manifest references. With --keep: keep those "
                                  "checkpoints, every aliased one and all their ancestors; remove the rest. "
                                  "Try it with --dry-run first.")
    add_registry(g, legacy_root=True)
    g.add_argument("--keep", nargs="*", default=None, metavar="REF", help="ids or aliases to keep (with ancestors)")
    g.add_argument("--dry-run", action="store_true", help="only report what would be removed")
    g.add_argument("--grace", type=float, default=3600.0, help="spare unreferenced blobs younger than this many seconds (default 3600)")
    g.set_defaults(func=cmd_gc)
    a = rs.add_parser("alias", help="point an alias at a checkpoint: NAME ID")
    a.add_argument("items", nargs="+", metavar="NAME ID", help="the alias and the checkpoint (id, prefix or alias)")
    a.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    a.set_defaults(func=cmd_alias, root=None)
    e = rs.add_parser("export-hf", help="write a checkpoint as a folder its paradigm's loader opens: ID OUT_DIR",
                      description="text and semid: a Hugging Face causal-LM folder (AutoModelForCausalLM) with a "
                                  "README.md model card (base_model, base_model_relation: finetune or merge, the "
                                  "method, its parameters and the lineage); emb and "
                                  "sasrec: refused with a named error (their scoring head lives outside a "
                                  "transformers model; see docs/registry.md).")
    e.add_argument("items", nargs="+", metavar="ID OUT_DIR", help="id, id prefix or alias; a new or empty folder")
    e.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    e.set_defaults(func=cmd_export, root=None)
    im = rs.add_parser("import-hf", help="bring in a Hugging Face folder (safetensors only; prints the id)")
    im.add_argument("items", nargs="+", metavar="HF_DIR")
    im.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    for name in ("paradigm", "domain", "period"):
        im.add_argument(f"--{name}", required=True, help=f"grid {name} of the imported checkpoint")
    im.add_argument("--variant", default="default")
    im.add_argument("--expect-arch", default=None, help="architecture or model_type config.json must name")
    im.add_argument("--like", default=None, metavar="REF", help="checkpoint whose tensor names and shapes must match")
    im.set_defaults(func=cmd_import, root=None)
    rm = rs.add_parser("remap-ids", help="reuse checkpoints stored under an earlier mmgrid's ids (no training)",
                       description="Stage ids are a function of content (the base, the prepared data's content, "
                                   "the training settings and knobs, the identity version), never of how a path is "
                                   "spelled. A registry built by an earlier mmgrid holds the grid's checkpoints "
                                   "under ids that also hashed data.root and evaluation-only knobs. This command "
                                   "recomputes each stage's earlier id and, where that checkpoint is stored and "
                                   "today's is not, stores the same tensors under today's id (blobs are shared, "
                                   "meta.same_as names the old id). Old ids, aliases and results stay valid. "
                                   "Afterwards `mmgrid build` trains none of the mapped stages.")
    rm.add_argument("config", nargs="?", default=None, metavar="CONFIG|RUN",
                    help="the grid the registry was built with: a run folder (its saved grid), a grid YAML or a "
                         "packaged grid name; none: the run of --registry or of the current folder")
    rm.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    rm.add_argument("--dry-run", action="store_true", help="only list what would be mapped")
    add_overrides(rm)
    rm.set_defaults(func=cmd_remap, root=None)
