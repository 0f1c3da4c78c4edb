"""CLI sub-commands ``mmgrid merge-lora``, ``mmgrid extract-lora`` and ``mmgrid apply-lora``
(see :mod:`mmgrid.merge.lora`).

``mmgrid merge-lora A B [C ...] --out DIR [--method task_arithmetic|ties] [--weights W ...]
[--rank N|full] [--energy E] [--density D] [--sign-rule unweighted|weighted] [--scale S]
[--dtype DTYPE] [--overwrite] [--per-module] [--json]``; prints the rank and the relative
reconstruction error (overall and the worst module).

``mmgrid extract-lora CHECKPOINT --base BASE --out DIR (--rank N | --energy E) [--include RE ...]
[--exclude RE ...] [--dtype DTYPE] [--overwrite] [--registry ROOT [--store] [--evaluate [--domain D]
[--split S] [--prepared DIR] [--config CONFIG]]] [--per-module] [--json]``: writes a PEFT LoRA
adapter and prints its rank and reconstruction error; ``--store`` also stores base + adapter in
the registry (lineage: merge_input the checkpoint, merge_base the base); ``--evaluate`` then
evaluates the adapter-applied model and the full checkpoint on the same users and prints the
ranking metrics side by side (both recorded in the registry).

``mmgrid apply-lora ADAPTER --base BASE --registry ROOT [--source ID] [--scale S] [--variant NAME]``:
stores base + adapter (e.g. the output of ``mmgrid merge-lora``) and prints its id, to be
evaluated with ``mmgrid eval --registry ROOT ID``.

The merging and the extraction themselves are :func:`mmgrid.merge.lora.merge_lora` and
:func:`mmgrid.merge.lora.extract_lora`; ``--evaluate`` evaluates through :mod:`mmgrid.eval`.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from mmgrid.cli.context import eval_config, eval_prepared, evaluator_kwargs
from mmgrid.cliargs import REGISTRY_HELP, registry_path
from mmgrid.errors import ConfigError

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``merge-lora``, ``extract-lora`` and ``apply-lora`` to the `mmgrid` parser."""
    _register_merge(sub)
    p = sub.add_parser(
        "extract-lora",
        help="extract a PEFT LoRA adapter from a checkpoint's task vector against a base",
        description="Write a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) whose "
        "B A is the best rank-r approximation of each linear weight's task vector (checkpoint - base; "
        "truncated SVD). Prints the relative reconstruction error per module and overall, and the share "
        "of the task vector the adapter does not carry (embeddings, LM head, norms stay at the base). "
        "See docs/merging.md, LoRA extraction.",
    )
    p.add_argument("checkpoint", help="the fine-tuned checkpoint: a registry id / alias (with --registry) or a "
                                      ".safetensors file / folder")
    p.add_argument("--base", required=True, help="the base the task vector is taken against (id, alias or path)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the adapter to")
    p.add_argument("--rank", type=int, help="rank of every module (at most its smaller side)")
    p.add_argument("--energy", type=float, help="or: the smallest rank holding this fraction of sum sigma^2, "
                                                "per module (with --rank: the smaller of the two)")
    p.add_argument("--include", nargs="+", metavar="RE", help="only modules matching one of these regexes")
    p.add_argument("--exclude", nargs="+", metavar="RE", help="leave out modules matching these regexes")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="adapter dtype (default: the checkpoint's)")
    p.add_argument("--overwrite", action="store_true", help="replace an adapter already in --out")
    p.add_argument("--registry", metavar="PATH", help="ids are read from, and --store writes to, this registry. "
                                                      + REGISTRY_HELP)
    p.add_argument("--store", action="store_true", help="also store base + adapter in the registry (prints its id)")
    p.add_argument("--evaluate", action="store_true",
                   help="store, then evaluate the adapter-applied model and the full checkpoint (Recall/NDCG, all / "
                        "active / non-active users) and print them side by side")
    p.add_argument("--domain", help="--evaluate: the domain (default: the checkpoint's)")
    p.add_argument("--split", help="--evaluate: the phase (default: eval.split)")
    p.add_argument("--prepared", help="--evaluate: the prepared data folder (default: beside the registry)")
    p.add_argument("--config", help="--evaluate: grid YAML with paradigm params and eval settings")
    p.add_argument("--per-module", action="store_true", help="also print rank and error of every module")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.set_defaults(func=_extract)

    a = sub.add_parser(
        "apply-lora",
        help="store base + a LoRA adapter in the registry (to evaluate extracted or merged adapters)",
        description="Add a PEFT LoRA adapter's updates (alpha/r) B A to a registry checkpoint (PEFT's "
        "merge_and_unload) and store the result with lineage (merge_base; merge_input with --source). "
        "Prints the new id; evaluate it with `mmgrid eval --registry ROOT ID`.",
    )
    a.add_argument("adapter", help="the adapter folder")
    a.add_argument("--base", required=True, help="registry id / alias of the base the adapter applies to")
    a.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    a.add_argument("--source", help="the checkpoint the adapter stands for (files, meta and coords are taken from "
                                    "it; default: the base's)")
    a.add_argument("--scale", type=float, default=1.0, help="factor on the adapter's update (default 1)")
    a.add_argument("--variant", help="coords variant of the stored model (default: lora-applied)")
    a.set_defaults(func=_apply)


def _extract(args: argparse.Namespace) -> int:
    # lazy: torch (seconds cold), which `mmgrid --help` must not pay
    from mmgrid.merge.lora import extract_lora
    from mmgrid.registry.api import Registry

    if (args.store or args.evaluate) and not args.registry:
        raise ConfigError("extract-lora --store/--evaluate: give --registry ROOT (where the applied model goes)")
    reg = Registry.open(registry_path(args, "extract-lora")) if args.registry else None
    report = extract_lora(args.checkpoint, args.base, args.out, rank=args.rank, energy=args.energy,
                          include=args.include, exclude=args.exclude, dtype=args.dtype, overwrite=args.overwrite,
                          registry=reg, store=args.store or args.evaluate)
    # --evaluate stores (a registry is required above), so reg and the applied id are set
    compared = (compare_ranking(args, reg, report.applied_id, args.checkpoint)  # type: ignore[arg-type]
                if args.evaluate else None)
    if args.json:
        print(json.dumps({**report.to_dict(), "ranking": compared}, indent=2))
        return 0
    print(report.summary())
    if args.per_module:
        for name in report.ranks:
            print(f"  {name}  rank {report.ranks[name]}  error {report.errors[name]:.3g}")
    if report.applied_id:
        print(f"stored base + adapter as {report.applied_id}")
    if compared:
        for group, metrics in compared.items():
            n = metrics.get("n", (None, None))[1]
            print(f"  {group} ({n:.0f} users, the same for both):" if n is not None else f"  {group}:")
            for m, (ad, full) in metrics.items():
                if m == "n":
                    continue
                ratio = f" ({ad / full:.3f} of it)" if full else ""
                print(f"    {m:<10} adapter {ad:.4f}  checkpoint {full:.4f}{ratio}")
    return 0


def compare_ranking(args: argparse.Namespace, reg: Registry, applied: str, full: str) -> dict[str, dict[str, tuple]]:
    """Evaluate the adapter-applied model and the full checkpoint on the same domain, split and
    users; record both; return group -> metric -> (adapter, checkpoint)."""
    # lazy: evaluation imports torch and the paradigms (seconds cold), which `mmgrid --help` must not pay
    from mmgrid.eval.ranking import evaluate_state, record_results
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.checkpoints import load_checkpoint

    args.overrides = []
    cfg = eval_config(args)
    man = reg.get(full)
    prepared = eval_prepared(args, cfg, man)
    domain = args.domain or man.coords.get("domain")
    if domain not in prepared.domains:
        raise ConfigError(f"extract-lora --evaluate: domain {domain!r} is not in {prepared.root}; pass --domain "
                          f"(one of {prepared.domains})")
    par = get_paradigm(man.coords["paradigm"])
    split = args.split or cfg.eval.split
    dom = prepared.domain(domain)
    out: dict[str, dict[str, list]] = {}
    for slot, cid in enumerate((applied, man.id)):
        res = evaluate_state(par, load_checkpoint(reg, cid), dom, cfg.paradigm_params.get(par.name, {}),
                             **evaluator_kwargs(cfg, split))
        record_results(reg, cid, split, res, str(domain))  # a domain of the prepared data
        for group, metrics in res.items():
            for m, v in metrics.items():
                out.setdefault(group, {}).setdefault(m, [None, None])[slot] = float(v)
    return {g: {m: tuple(v) for m, v in ms.items()} for g, ms in out.items()}


def _apply(args: argparse.Namespace) -> int:
    # lazy: torch (seconds cold), which `mmgrid --help` must not pay
    from mmgrid.merge.lora import store_applied
    from mmgrid.registry.api import Registry

    reg = Registry.open(registry_path(args, "apply-lora"))
    coords = dict(reg.get(args.source or args.base).coords)
    coords["variant"] = args.variant or "lora-applied"
    cid = store_applied(args.adapter, args.base, reg, coords=coords, source=args.source, scale=args.scale)
    print(cid)
    return 0


def _register_merge(sub: argparse._SubParsersAction) -> None:
    """``merge-lora``."""
    p = sub.add_parser(
        "merge-lora",
        help="merge PEFT LoRA adapters into one LoRA adapter (task arithmetic / TIES + truncated SVD)",
        description="Merge PEFT LoRA adapter folders (adapter_config.json + adapter_model.safetensors) "
        "into one LoRA adapter without a base model: the products (alpha/r) B A are combined by task "
        "arithmetic or TIES and re-factorised by truncated SVD; prints the relative reconstruction "
        "error (see docs/merging.md, LoRA-to-LoRA merging).",
    )
    p.add_argument("adapters", nargs="+", metavar="ADAPTER", help="adapter folders, in order")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the merged adapter to")
    p.add_argument("--method", default="task_arithmetic", choices=("task_arithmetic", "ties"))
    p.add_argument("--weights", nargs="+", type=float, metavar="W", help="one weight per adapter (default 1.0 each)")
    p.add_argument("--rank", help="output rank: an integer or 'full' (default: the largest input rank)")
    p.add_argument("--energy", type=float,
                   help="keep the smallest rank holding this fraction of sum sigma^2, e.g. 0.99")
    p.add_argument("--density", type=float, help="TIES: kept fraction of each product (default 0.2)")
    p.add_argument("--sign-rule", choices=("unweighted", "weighted"),
                   help="TIES sign election: unweighted (paper, default) or weighted (mergekit)")
    p.add_argument("--scale", type=float, default=1.0, help="factor on the merged update (default 1)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="output dtype (default: the inputs')")
    p.add_argument("--overwrite", action="store_true", help="replace an adapter already in --out")
    p.add_argument("--per-module", action="store_true", help="also print rank and error of every module")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.set_defaults(func=_merge)


def _merge(args: argparse.Namespace) -> int:
    # lazy: merging imports torch (4.5 s cold, measured), which `mmgrid --help` must not pay
    from mmgrid.merge.lora import merge_lora

    rank = args.rank
    if rank is not None and rank != "full":
        rank = int(rank) if rank.isdigit() else rank  # anything else is refused by merge_lora
    report = merge_lora(
        args.adapters, args.out, method=args.method, weights=args.weights, rank=rank, energy=args.energy,
        density=args.density, sign_rule=args.sign_rule, scale=args.scale, dtype=args.dtype, overwrite=args.overwrite,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print(report.summary())
    if args.per_module:
        for name in report.ranks:
            print(f"  {name}  rank {report.ranks[name]}  error {report.errors[name]:.3g}")
    return 0
