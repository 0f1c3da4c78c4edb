"""CLI sub-command ``mmgrid merge-lora`` (see mmgrid/cli.py and mmgrid/merge/lora/).

``mmgrid merge-lora A B [C ...] --out DIR [--method task_arithmetic|ties] [--weights W ...]
[--rank N|full] [--energy E] [--density D] [--sign-rule unweighted|weighted] [--scale S]
[--dtype DTYPE] [--overwrite] [--per-module] [--json]``; prints the rank and the relative
reconstruction error (overall and the worst module).
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``merge-lora`` to the `mmgrid` parser."""
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
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
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
