"""One training stage of one (variant, paradigm, domain): load, train, store."""

from __future__ import annotations

from typing import Any

from mmgrid.errors import DataError


def train_one_stage(cfg: Any, registry: Any, prepared: Any, variant_name: str, paradigm: str, domain: str,
                    stage: str, parent_id: str, first: bool, progress: bool = True) -> str:
    """Train stage ``stage`` from ``parent_id`` and put it into the registry.

    The first stage starts from ``paradigm.build(base)``; later ones from the parent
    checkpoint as stored. A regularizer's origin is the paradigm's initial model (built
    from the base with the same seed), so every stage of a row is pulled towards the
    same theta_init (Orbit paper, section 4.1). Under torchrun only rank 0 writes; every
    rank returns the id.

    Returns:
        The new checkpoint's id.
    """
    from mmgrid.models.base import load_base
    from mmgrid.paradigms import get_paradigm
    from mmgrid.train.checkpoints import load_checkpoint
    from mmgrid.train.device import derive_seed, seed_everything
    from mmgrid.train.loop import dist_context, train_stage

    variant = next(v for v in cfg.variants if v.name == variant_name)
    par = get_paradigm(paradigm)
    params = dict(cfg.paradigm_params.get(paradigm, {}))
    dom = prepared.domain(domain)
    base, base_id = load_base(cfg.base, prepared, registry, seed=cfg.train.seed)
    build_seed = derive_seed(cfg.train.seed, paradigm, domain, "build")
    if first:
        seed_everything(build_seed)
        model = par.build(base, dom, params, build_seed)
    else:
        # the RNG state a job sees must not depend on what ran before it in this process (resume)
        seed_everything(derive_seed(cfg.train.seed, paradigm, domain, stage, "load"))
        model = par.load(load_checkpoint(registry, parent_id), dom, params)
    examples = par.examples(model, dom, stage)
    if not examples:
        raise DataError(f"{paradigm}/{domain}: phase {stage!r} has no training examples; drop the domain, "
                        "widen data.phases or lower data.kcore.")
    regs = _regularizers(variant, par, model, base, dom, params, build_seed, first)
    where = f"{paradigm}/{domain}/{stage}" + ("" if variant_name == "default" else f" [{variant_name}]")
    dist = dist_context(cfg.train.device)
    log = train_stage(par, model, examples, epochs=cfg.train.epochs[stage], lr=cfg.train.lr,
                      batch_size=cfg.train.batch_size, seed=derive_seed(cfg.train.seed, paradigm, domain, stage),
                      weight_decay=cfg.train.weight_decay, regularizers=regs, max_examples=cfg.train.max_examples,
                      where=where, progress=progress, device=cfg.train.device, dtype=cfg.train.dtype, dist=dist)
    if progress and (dist is None or dist.is_main):
        from tqdm.auto import tqdm

        losses = " -> ".join(f"{x:.3f}" for x in log.epoch_losses)
        tqdm.write(f"{where}: {log.examples} examples, {log.steps} steps, loss {losses}, {log.seconds:.1f}s"
                   + (f", {log.n_events} back-merges" if log.n_events else ""))
    if dist is None or not dist.distributed:
        return _store(cfg, registry, prepared, par, model, variant, paradigm, domain, stage, parent_id, first,
                      base_id, log)
    from mmgrid.exec.ddp import broadcast_object

    cid = None
    if dist.is_main:
        cid = _store(cfg, registry, prepared, par, model, variant, paradigm, domain, stage, parent_id, first,
                     base_id, log)
    return broadcast_object(cid, dist)


def _store(cfg: Any, registry: Any, prepared: Any, par: Any, model: Any, variant: Any, paradigm: str, domain: str,
           stage: str, parent_id: str, first: bool, base_id: str, log: Any) -> str:
    from mmgrid.train.build import stage_config_hash, stage_params
    from mmgrid.train.checkpoints import checkpoint_meta

    model.to("cpu")
    ckpt = par.save(model)
    coords = {"paradigm": paradigm, "domain": domain, "period": stage, "variant": variant.name}
    parents = [(parent_id, "init" if first else "previous_stage")]
    return registry.put(
        {k: v.detach().cpu().contiguous() for k, v in ckpt.state.items()}, coords, "trained", parents=parents,
        params=stage_params(cfg, variant, paradigm, stage), files=ckpt.files,
        meta=checkpoint_meta(ckpt, {"train_log": log.to_dict(), "base_id": base_id}),
        seed=cfg.train.seed, config_hash=stage_config_hash(cfg, base_id, prepared.fingerprint),
        data_fingerprint=prepared.fingerprint,
    )


def _regularizers(variant: Any, par: Any, model: Any, base: Any, dom: Any, params: dict, build_seed: int,
                  first: bool) -> list[Any]:
    """The variant's regularizer, its origin being the paradigm's initial (built) model."""
    if variant.regularizer == "none":
        return []
    from mmgrid.train.device import seed_everything
    from mmgrid.train.origin import make_origin
    from mmgrid.train.regularizers import make_regularizer

    init_model = model  # the first stage has not trained yet: its start is the origin
    if not first:
        seed_everything(build_seed)  # same seed as the first stage's build: the same theta_init
        init_model = par.build(base, dom, params, build_seed)
    state = {n: p.detach().clone() for n, p in init_model.named_parameters()}
    added = par.save(model).added_rows
    return [make_regularizer(variant.regularizer, variant.params, make_origin(model, state, added))]
