"""One training stage of one (variant, paradigm, domain): load, train, store.

:func:`run_stage` is the job an executor runs (``"mmgrid.train.stage:run_stage"``, every
argument JSON-able): it turns the grid dict back into the typed :class:`GridConfig` once,
at the process boundary, and hands the typed config to :func:`train_one_stage`, which
passes ``cfg.train`` (epochs, lr, batch size, ``max_examples``, device, dtype) straight
to :func:`mmgrid.train.loop.train_stage`. The stage's identity (its parameters and
config hash) comes from :mod:`mmgrid.runtime.plan`, the same functions the build's plan used.
"""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm

from mmgrid.config import GridConfig, grid_from_dict
from mmgrid.errors import DataError, RegistryError
from mmgrid.exec.ddp import broadcast_object
from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.checkpoints import checkpoint_meta, load_checkpoint
from mmgrid.runtime.context import open_prepared, open_registry
from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
from mmgrid.runtime.plan import stage_config_hash, stage_params
from mmgrid.train.base_lm import ensure_base
from mmgrid.train.loop import dist_context, train_stage
from mmgrid.train.origin import make_origin
from mmgrid.train.regularizers import make_regularizer


def run_stage(config: dict[str, Any], variant: str, paradigm: str, domain: str, stage: str, parent_id: str,
              stage_id: str, first: bool, progress: bool = True, seed: int | None = None) -> str:
    """Train one stage and store it; a no-op when ``stage_id`` is already stored.

    ``seed``: the replicate's training seed (default ``train.seed``, the first of ``train.seeds``).

    Runs as an executor job: every argument is JSON-able (``config`` is ``GridConfig.to_dict()``
    with absolute ``prepared`` and ``registry`` paths).

    Returns:
        The stage's checkpoint id.
    """
    cfg = grid_from_dict(config)
    set_threads(cfg.train.threads)
    registry = open_registry(cfg.registry)
    if registry.has(stage_id):
        return stage_id
    prepared = open_prepared(cfg.prepared)
    cid = train_one_stage(cfg, registry, prepared, variant, paradigm, domain, stage, parent_id, first, progress, seed)
    if cid is not None and cid != stage_id:
        raise RegistryError(f"{paradigm}/{domain}/{stage}: stored as {cid} but planned as {stage_id}; "
                            "the identity used by the plan and by the job differ (a bug).")
    return stage_id


def train_one_stage(cfg: GridConfig, registry: Any, prepared: Any, variant_name: str, paradigm: str, domain: str,
                    stage: str, parent_id: str, first: bool, progress: bool = True, seed: int | None = None) -> str:
    """Train stage ``stage`` from ``parent_id`` and put it into the registry.

    ``seed`` (default ``train.seed``) seeds the build, the load and the training of this
    replicate and is stored in its identity; the base is the grid's shared one (first seed).

    The first stage starts from ``paradigm.build(base)``; later ones from the parent
    checkpoint as stored. A regularizer's origin is the paradigm's initial model (built
    from the base with the same seed), so every stage of a row is pulled towards the
    same theta_init (Orbit paper, section 4.1). Under torchrun only rank 0 writes; every
    rank returns the id.

    Returns:
        The new checkpoint's id.
    """
    variant = next(v for v in cfg.variants if v.name == variant_name)
    par = get_paradigm(paradigm)
    params = dict(cfg.paradigm_params.get(paradigm, {}))
    dom = prepared.domain(domain)
    seed = cfg.train.seed if seed is None else int(seed)
    base, base_id = ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed)  # shared by every seed
    build_seed = derive_seed(seed, paradigm, domain, "build")
    if first:
        seed_everything(build_seed)
        model = par.build(base, dom, params, build_seed)
    else:
        # the RNG state a job sees must not depend on what ran before it in this process (resume)
        seed_everything(derive_seed(seed, paradigm, domain, stage, "load"))
        model = par.load(load_checkpoint(registry, parent_id), dom, params)
    examples = par.examples(model, dom, stage)
    if not examples:
        raise DataError(f"{paradigm}/{domain}: phase {stage!r} has no training examples; drop the domain, "
                        "widen data.phases or lower data.kcore.")
    regs = _regularizers(variant, par, model, base, dom, params, build_seed, first)
    where = f"{paradigm}/{domain}/{stage}" + ("" if variant_name == "default" else f" [{variant_name}]") \
        + ("" if len(cfg.train.seed_list) == 1 else f" seed={seed}")
    t = cfg.train
    dist = dist_context(t.device)
    log = train_stage(par, model, examples, epochs=t.epochs[stage], lr=t.lr, batch_size=t.batch_size,
                      seed=derive_seed(seed, paradigm, domain, stage), weight_decay=t.weight_decay,
                      regularizers=regs, max_examples=t.max_examples, where=where, progress=progress,
                      device=t.device, dtype=t.dtype, dist=dist)
    if progress and (dist is None or dist.is_main):
        losses = " -> ".join(f"{x:.3f}" for x in log.epoch_losses)
        tqdm.write(f"{where}: {log.examples} examples, {log.steps} steps, loss {losses}, {log.seconds:.1f}s"
                   + (f", {log.n_events} back-merges" if log.n_events else ""))
    if dist is None or not dist.distributed:
        return _store(cfg, registry, prepared, par, model, variant, paradigm, domain, stage, parent_id, first,
                      base_id, log, seed)
    cid = None
    if dist.is_main:
        cid = _store(cfg, registry, prepared, par, model, variant, paradigm, domain, stage, parent_id, first,
                     base_id, log, seed)
    return broadcast_object(cid, dist)


def _store(cfg: GridConfig, registry: Any, prepared: Any, par: Any, model: Any, variant: Any, paradigm: str,
           domain: str, stage: str, parent_id: str, first: bool, base_id: str, log: Any, seed: int) -> str:
    model.to("cpu")
    ckpt = par.save(model)
    coords = {"paradigm": paradigm, "domain": domain, "period": stage, "variant": variant.name}
    parents = [(parent_id, "init" if first else "previous_stage")]
    return registry.put(
        {k: v.detach().cpu().contiguous() for k, v in ckpt.state.items()}, coords, "trained", parents=parents,
        params=stage_params(cfg, variant, paradigm, stage), files=ckpt.files,
        meta=checkpoint_meta(ckpt, {"train_log": log.to_dict(), "base_id": base_id}),
        seed=seed, config_hash=stage_config_hash(cfg, base_id, prepared.fingerprint),
        data_fingerprint=prepared.fingerprint,
    )


def _regularizers(variant: Any, par: Any, model: Any, base: Any, dom: Any, params: dict, build_seed: int,
                  first: bool) -> list[Any]:
    """The variant's regularizer, its origin being the paradigm's initial (built) model."""
    if variant.regularizer == "none":
        return []
    init_model = model  # the first stage has not trained yet: its start is the origin
    if not first:
        seed_everything(build_seed)  # same seed as the first stage's build: the same theta_init
        init_model = par.build(base, dom, params, build_seed)
    state = {n: p.detach().clone() for n, p in init_model.named_parameters()}
    added = par.save(model).added_rows
    return [make_regularizer(variant.regularizer, variant.params, make_origin(model, state, added))]
