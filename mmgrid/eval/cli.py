"""The handlers behind ``mmgrid eval`` (a grid, one checkpoint, or a merge recipe)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from mmgrid.errors import ConfigError


def _config(args: argparse.Namespace) -> Any:
    """The grid config giving paradigm params and eval settings (``--config``, else defaults)."""
    from mmgrid.config import GridConfig, load_grid
    from mmgrid.configtools import build

    if getattr(args, "config", None):
        return load_grid(args.config, args.overrides)
    return build(GridConfig, {"name": "eval"})


def _print(title: str, results: dict[str, dict[str, float]]) -> None:
    print(title)
    for group, metrics in results.items():
        shown = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k != "n")
        print(f"  {group:<10} n={int(metrics.get('n', 0)):<6} {shown}")


def eval_grid_cli(args: argparse.Namespace) -> int:
    """``mmgrid eval CONFIG``: evaluate every stored final checkpoint of the grid."""
    from mmgrid.config import load_grid
    from mmgrid.eval.grid import evaluate_grid
    from mmgrid.eval.table import baseline_table
    from mmgrid.train.build import plan_grid
    from mmgrid.train.context import open_registry

    if not args.target:
        raise ConfigError("mmgrid eval: give a grid YAML, or --registry ROOT ID, or --recipe FILE.yaml.")
    cfg = load_grid(args.target, args.overrides)
    plan = plan_grid(cfg)
    evaluate_grid(cfg, plan, redo=True)
    domains = list(dict.fromkeys(s.domain for s in plan.stages))
    print(baseline_table(open_registry(cfg.registry), cfg.paradigms, domains, ks=cfg.eval.ks,
                         split=cfg.eval.split, period=cfg.train.stages[-1]))
    return 0


def eval_checkpoint_cli(args: argparse.Namespace) -> int:
    """``mmgrid eval --registry ROOT ID``: one checkpoint (any kind) on its own or another domain."""
    from mmgrid.registry.api import Registry

    if not args.target:
        raise ConfigError("mmgrid eval --registry ROOT ID: the checkpoint id (or alias) is missing.")
    cfg = _config(args)
    reg = Registry.open(args.registry)
    man = reg.get(args.target)
    prepared = _prepared(args, cfg)
    if man.coords.get("paradigm") == "base":
        return _eval_base(reg, man.id, prepared, cfg, args)
    domain = args.domain or man.coords.get("domain")
    if domain not in prepared.domains:
        raise ConfigError(f"checkpoint {man.id[:12]} has domain {domain!r}, which is not in {prepared.root}; "
                          f"pass --domain (one of {prepared.domains}).")
    from mmgrid.eval.ranking import evaluate_state, record_results
    from mmgrid.paradigms import get_paradigm
    from mmgrid.train.checkpoints import load_checkpoint

    par = get_paradigm(man.coords["paradigm"])
    split = args.split or cfg.eval.split
    dom = prepared.domain(domain)
    res = evaluate_state(par, load_checkpoint(reg, man.id), dom, cfg.paradigm_params.get(par.name, {}),
                         **_eval_kwargs(cfg, split))
    _print(f"{man.id[:12]} {man.coords} on {domain}/{split}", res)
    if not args.no_record:
        record_results(reg, man.id, split, res, domain)
    return 0


def eval_recipe_cli(args: argparse.Namespace) -> int:
    """``mmgrid eval --recipe FILE.yaml``: merge in memory, evaluate, record against the recipe."""
    from mmgrid.eval.ranking import evaluate_state, record_results
    from mmgrid.merge.api import merge_with_info
    from mmgrid.merge.recipe import Recipe
    from mmgrid.paradigms import get_paradigm
    from mmgrid.paradigms.base import Checkpoint
    from mmgrid.registry.api import Registry
    from mmgrid.train.checkpoints import load_checkpoint

    cfg = _config(args)
    recipe = Recipe.load(args.recipe)
    reg = Registry.open(args.registry or cfg.registry)
    first = reg.get(recipe.inputs[0])
    domain = args.domain or first.coords.get("domain")
    prepared = _prepared(args, cfg)
    if domain not in prepared.domains:
        raise ConfigError(f"recipe {args.recipe}: evaluate on which domain? pass --domain (one of {prepared.domains}).")
    state, info = merge_with_info(recipe.method, recipe.inputs, recipe.base, reg, **recipe.method_params())
    template = load_checkpoint(reg, first.id)
    added = {k: (int(v[0]), list(v[1])) for k, v in (info.added_rows or {}).items()} or template.added_rows
    ckpt = Checkpoint(state=state, files=template.files, meta=template.meta, added_rows=added)
    par = get_paradigm(first.coords["paradigm"])
    split = args.split or cfg.eval.split
    res = evaluate_state(par, ckpt, prepared.domain(domain), cfg.paradigm_params.get(par.name, {}),
                         **_eval_kwargs(cfg, split))
    _print(f"recipe {args.recipe} ({recipe.method}) on {domain}/{split}", res)
    if not args.no_record:
        record_results(reg, None, split, res, domain, recipe=dataclasses.asdict(recipe))
    return 0


def _eval_base(reg: Any, cid: str, prepared: Any, cfg: Any, args: argparse.Namespace) -> int:
    from mmgrid.eval.grid import RETENTION_SPLIT
    from mmgrid.eval.retention import text_loss
    from mmgrid.models.base import bundle_from_registry

    bundle = bundle_from_registry(reg, cid)
    loss = text_loss(bundle.model, bundle.tokenizer, prepared.lm_text("heldout"), cfg.base.max_length)
    print(f"base {cid[:12]}: held-out text loss {loss:.4f}")
    if not args.no_record:
        reg.record_eval(cid, RETENTION_SPLIT, "all", {"text_loss": loss})
    return 0


def _prepared(args: argparse.Namespace, cfg: Any) -> Any:
    from mmgrid.errors import MmgridError
    from mmgrid.train.context import open_prepared

    path = args.prepared or cfg.prepared
    try:
        return open_prepared(path)
    except MmgridError as exc:
        raise ConfigError(f"{exc} (pass --prepared DIR or --config CONFIG)") from exc


def _eval_kwargs(cfg: Any, split: str) -> dict[str, Any]:
    e = cfg.eval
    return {"split": split, "ks": e.ks, "groups": e.groups, "activity_phase": e.activity_phase,
            "max_users": e.max_users, "seed": cfg.train.seed}
