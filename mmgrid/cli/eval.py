"""CLI sub-command ``mmgrid eval``: a grid, one checkpoint, or a merge recipe (the evaluation
itself is :mod:`mmgrid.eval`)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from mmgrid.cli.context import eval_config, eval_prepared, evaluator_kwargs, grid_source, load_source
from mmgrid.cliargs import REGISTRY_HELP, registry_path
from mmgrid.errors import ConfigError

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry

# paradigms whose checkpoint holds an item table of its own domain: they rank that catalog only
OWN_CATALOG = {"emb": "its item-id table and item embeddings", "sasrec": "its item-id embedding table"}

# lazy: every handler imports what it runs inside itself, so that `mmgrid --help` (which imports
# this module to register `eval`) does not pay for torch (~3.5 s), transformers and the registry
# (measured with `python -X importtime -m mmgrid eval --help`; docs/architecture.md).


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    e = sub.add_parser("eval", help="evaluate a grid, a registry checkpoint, or a merge recipe",
                       description="Recall@K / NDCG@K (full ranking, all / active / non-active users) and text "
                                   "retention, recorded in the registry. Forms: `mmgrid eval CONFIG|RUN [KEY=VALUE...]`; "
                                   "`mmgrid eval --registry PATH ID [--domain D] [KEY=VALUE...]` (the settings of the "
                                   "run that built PATH, or --config CONFIG); "
                                   "`mmgrid eval --recipe FILE.yaml [--registry PATH]`. KEY=VALUE overrides apply to "
                                   "that grid (e.g. eval.max_users=50).")
    e.add_argument("target", nargs="?", help="a grid YAML or run folder; or (with --registry) a checkpoint id / alias")
    e.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="override a key of the grid, e.g. eval.max_users=50")
    e.add_argument("--registry", metavar="PATH", help="evaluate one checkpoint of this registry (or run folder); " + REGISTRY_HELP)
    e.add_argument("--recipe", help="merge recipe YAML: method, models, base, params (evaluated, never stored)")
    e.add_argument("--domain", help="domain to evaluate on (default: the checkpoint's own)")
    e.add_argument("--prepared", help="prepared dataset folder (default: the config's)")
    e.add_argument("--config", help="grid YAML or run folder giving paradigm params and eval settings (default: the "
                                    "registry's saved run, else the defaults)")
    e.add_argument("--split", help="phase to evaluate (default: eval.split)")
    e.add_argument("--no-record", action="store_true", help="print only, record nothing")
    e.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    if args.recipe:
        return eval_recipe_cli(args)
    if args.registry:
        return eval_checkpoint_cli(args)
    return eval_grid_cli(args)


def _print(title: str, results: dict[str, dict[str, float]]) -> None:
    print(title)
    for group, metrics in results.items():
        shown = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k != "n")
        print(f"  {group:<10} n={int(metrics.get('n', 0)):<6} {shown}")


def eval_grid_cli(args: argparse.Namespace) -> int:
    """``mmgrid eval CONFIG``: evaluate every stored final checkpoint of the grid (again), then
    print the baseline table."""
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.eval.grid import evaluate_and_tabulate
    from mmgrid.validate import validate_grid

    if not args.target:
        raise ConfigError("mmgrid eval: give a grid YAML or run folder, or --registry PATH ID, or --recipe FILE.yaml.")
    cfg = load_source(grid_source(args.target, command="eval"), args.overrides)
    validate_grid(cfg)
    print(evaluate_and_tabulate(cfg, redo=True))
    return 0


def eval_checkpoint_cli(args: argparse.Namespace) -> int:
    """``mmgrid eval --registry ROOT ID``: one checkpoint (any kind) on its own or another domain."""
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.eval.ranking import evaluate_state, record_results
    from mmgrid.paradigms import get_paradigm
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.checkpoints import load_checkpoint

    if not args.target:
        raise ConfigError("mmgrid eval --registry PATH ID: the checkpoint id (or alias) is missing.")
    root = registry_path(args, "eval")
    cfg = eval_config(args, root)
    reg = Registry.open(root)
    if not args.no_record:
        reg.require_writable("`mmgrid eval` (it records; --no-record only prints)")
    man = reg.get(args.target)
    prepared = eval_prepared(args, cfg, man)
    if man.coords.get("paradigm") == "base":
        return _eval_base(reg, man.id, prepared, cfg, args)
    domain = args.domain or man.coords.get("domain")
    if domain not in prepared.domains:
        raise ConfigError(f"checkpoint {man.id[:12]} has domain {domain!r}, which is not in {prepared.root}; "
                          f"pass --domain (one of {prepared.domains}).")
    own = man.coords.get("domain")
    if man.coords.get("paradigm") in OWN_CATALOG and own != domain:
        raise ConfigError(f"checkpoint {man.id[:12]} ({man.coords['paradigm']}, trained on {own}) ranks {own}'s "
                          f"items only ({OWN_CATALOG[man.coords['paradigm']]} has one row per {own} item), so it cannot rank "
                          f"{domain}'s items. Evaluate it on {own} (drop --domain), or evaluate a text checkpoint on "
                          f"{domain} (its items are text, not table rows; a semid checkpoint ranks only the domains "
                          f"whose code tokens it holds).")
    par = get_paradigm(man.coords["paradigm"])
    split = args.split or cfg.eval.split
    dom = prepared.domain(domain)
    res = evaluate_state(par, load_checkpoint(reg, man.id), dom, cfg.paradigm_params.get(par.name, {}),
                         **evaluator_kwargs(cfg, split))
    _print(f"{man.id[:12]} {man.coords} on {domain}/{split}", res)
    if not args.no_record:
        record_results(reg, man.id, split, res, str(domain))  # a domain of the prepared data (checked above)
    return 0


def eval_recipe_cli(args: argparse.Namespace) -> int:
    """``mmgrid eval --recipe FILE.yaml``: merge in memory, evaluate, record against the recipe."""
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.eval.ranking import evaluate_state, record_results
    from mmgrid.merge.api import merge_with_info
    from mmgrid.merge.recipe import read_recipe
    from mmgrid.merge.tensors import from_manifest
    from mmgrid.paradigms import get_paradigm
    from mmgrid.paradigms.base import Checkpoint
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.checkpoints import load_checkpoint

    checked = read_recipe(args.recipe)  # validated once; the merge takes the checked parameters
    recipe = checked.recipe
    root = registry_path(args, "eval") if (args.registry or args.config is None) else None
    cfg = eval_config(args, root)
    reg = Registry.open(root if root is not None else cfg.registry_root)
    if not args.no_record:
        reg.require_writable("`mmgrid eval` (it records; --no-record only prints)")
    inputs = [reg.get(i) for i in recipe.inputs]  # each input looked up once
    first = inputs[0]
    domain = args.domain or first.coords.get("domain")
    prepared = eval_prepared(args, cfg)
    if domain not in prepared.domains:
        raise ConfigError(f"recipe {args.recipe}: evaluate on which domain? pass --domain (one of {prepared.domains}).")
    state, info = merge_with_info(checked.method, [from_manifest(reg, m) for m in inputs], recipe.base, reg)
    template = load_checkpoint(reg, first.id)
    added = {k: (int(v[0]), list(v[1])) for k, v in (info.added_rows or {}).items()} or template.added_rows
    ckpt = Checkpoint(state=state, files=template.files, meta=template.meta, added_rows=added)
    par = get_paradigm(first.coords["paradigm"])
    split = args.split or cfg.eval.split
    res = evaluate_state(par, ckpt, prepared.domain(domain), cfg.paradigm_params.get(par.name, {}),
                         **evaluator_kwargs(cfg, split))
    _print(f"recipe {args.recipe} ({recipe.method}) on {domain}/{split}", res)
    if not args.no_record:
        record_results(reg, None, split, res, str(domain), recipe=dataclasses.asdict(recipe))
    return 0


def _eval_base(reg: Registry, cid: str, prepared: PreparedDataset, cfg: GridConfig, args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.eval.grid import RETENTION_SPLIT
    from mmgrid.eval.retention import text_loss
    from mmgrid.models.base import bundle_from_registry

    bundle = bundle_from_registry(reg, cid)
    loss = text_loss(bundle.model, bundle.tokenizer, prepared.lm_text("heldout"), cfg.base.max_length)
    print(f"base {cid[:12]}: held-out text loss {loss:.4f}")
    if not args.no_record:
        reg.record_eval(cid, RETENTION_SPLIT, "all", {"text_loss": loss})
    return 0
