"""One training stage of one (variant, paradigm, domain): load, train, store.

:func:`run_stage` is the job an executor runs (``"mmgrid.train.stage:run_stage"``, every
argument JSON-able): it turns the grid dict back into the typed :class:`GridConfig` once,
at the process boundary, and hands the typed config to :func:`train_one_stage`, which
passes ``cfg.train`` (epochs, lr, batch size, ``max_examples``, device, dtype) straight
to :func:`mmgrid.train.loop.train_stage` as one :class:`~mmgrid.train.loop.StageSettings`. The
plan travels whole (:class:`mmgrid.runtime.plan.StagePlan`) and its resolved inputs as one
:class:`StageRun`. The stage's identity (its parameters and
config hash) comes from :mod:`mmgrid.runtime.plan`, the same functions the build's plan used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tqdm.auto import tqdm

from mmgrid.config import GridConfig, grid_from_dict
from mmgrid.errors import DataError, RegistryError
from mmgrid.exec.ddp import broadcast_object
from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.checkpoints import checkpoint_meta, load_checkpoint
from mmgrid.runtime.context import open_prepared, open_registry
from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
from mmgrid.runtime.plan import StagePlan, stage_config_hash, stage_params
from mmgrid.train.base_lm import ensure_base
from mmgrid.train.loop import StageLog, StageSettings, dist_context, train_stage
from mmgrid.train.origin import make_origin
from mmgrid.train.regularizers import make_regularizer

if TYPE_CHECKING:
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry


@dataclass
class StageRun:
    """One stage's inputs, resolved once from the config and the plan (the record the stage's
    steps pass around instead of loose values).

    Attributes:
        cfg: the grid.
        registry: the open registry.
        prepared: the prepared dataset.
        plan: the stage (variant, paradigm, domain, stage, planned id, parent, first, seed).
        variant: the plan's variant row of the grid.
        paradigm: the paradigm object.
        params: its knobs (``paradigm_params.<name>``).
        domain: the domain's data.
        base: the grid's shared base (trained with the first seed).
        base_id: its id.
    """

    cfg: GridConfig
    registry: Registry
    prepared: PreparedDataset
    plan: StagePlan
    variant: Any
    paradigm: Any
    params: dict[str, Any]
    domain: Any
    base: Any
    base_id: str

    @property
    def build_seed(self) -> int:
        """The seed of ``paradigm.build``: every stage of a row derives the same theta_init from it."""
        return derive_seed(self.plan.seed, self.plan.paradigm, self.plan.domain, "build")

    @property
    def where(self) -> str:
        p = self.plan
        return f"{p.paradigm}/{p.domain}/{p.stage}" + ("" if p.variant == "default" else f" [{p.variant}]") \
            + ("" if len(self.cfg.train.seed_list) == 1 else f" seed={p.seed}")

    def initial_model(self) -> Any:
        """theta_init: the paradigm's model built from the base with :attr:`build_seed` (the first
        stage's start and every stage's regularizer origin, Orbit paper section 4.1)."""
        seed_everything(self.build_seed)
        return self.paradigm.build(self.base, self.domain, self.params, self.build_seed)

    def settings(self) -> StageSettings:
        """The training loop's hyperparameters for this stage (``cfg.train``)."""
        t, p = self.cfg.train, self.plan
        return StageSettings(epochs=t.epochs[p.stage], lr=t.lr, batch_size=t.batch_size,
                             seed=derive_seed(p.seed, p.paradigm, p.domain, p.stage), weight_decay=t.weight_decay,
                             max_examples=t.max_examples, device=t.device, dtype=t.dtype)


def run_stage(config: dict[str, Any], plan: dict[str, Any], progress: bool = True) -> str:
    """Train one stage and store it; a no-op when the planned id is already stored.

    Runs as an executor job: every argument is JSON-able (``config`` is ``GridConfig.to_dict()``
    with absolute ``prepared`` and ``registry`` paths; ``plan`` the fields of
    :class:`mmgrid.runtime.plan.StagePlan`, whose ``seed`` is the replicate's training seed,
    default ``train.seed``).

    Returns:
        The stage's checkpoint id.
    """
    cfg = grid_from_dict(config)
    sp = StagePlan(**{"seed": cfg.train.seed, **plan})
    set_threads(cfg.train.threads)
    registry = open_registry(cfg.registry_root)
    if registry.has(sp.id):
        return sp.id
    cid = train_one_stage(cfg, registry, open_prepared(cfg.prepared_dir), sp, progress)
    if cid is not None and cid != sp.id:
        raise RegistryError(f"{sp.paradigm}/{sp.domain}/{sp.stage}: stored as {cid} but planned as {sp.id}; "
                            "the identity used by the plan and by the job differ (a bug).")
    return sp.id


def train_one_stage(cfg: GridConfig, registry: Registry, prepared: PreparedDataset, plan: StagePlan, progress: bool = True) -> str:
    """Train stage ``plan.stage`` from ``plan.parent_id`` and put it into the registry.

    ``plan.seed`` seeds the build, the load and the training of this replicate and is stored in
    its identity; the base is the grid's shared one (first seed).

    The first stage starts from ``paradigm.build(base)``; later ones from the parent
    checkpoint as stored. A regularizer's origin is the paradigm's initial model (built
    from the base with the same seed, :meth:`StageRun.initial_model`), so every stage of a row is
    pulled towards the same theta_init (Orbit paper, section 4.1). Under torchrun only rank 0
    writes; every rank returns the id.

    Returns:
        The new checkpoint's id.
    """
    base, base_id = ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed)  # shared by every seed
    run = StageRun(cfg, registry, prepared, plan, next(v for v in cfg.variants if v.name == plan.variant),
                   get_paradigm(plan.paradigm), dict(cfg.paradigm_params.get(plan.paradigm, {})),
                   prepared.domain(plan.domain), base, base_id)
    if plan.first:
        model = run.initial_model()
    else:
        # the RNG state a job sees must not depend on what ran before it in this process (resume)
        seed_everything(derive_seed(plan.seed, plan.paradigm, plan.domain, plan.stage, "load"))
        model = run.paradigm.load(load_checkpoint(registry, plan.parent_id), run.domain, run.params)
    examples = run.paradigm.examples(model, run.domain, plan.stage)
    if not examples:
        raise DataError(f"{plan.paradigm}/{plan.domain}: phase {plan.stage!r} has no training examples; drop the "
                        "domain, widen data.phases or lower data.kcore.")
    regs = _regularizers(run, model)
    dist = dist_context(cfg.train.device)
    log = train_stage(run.paradigm, model, examples, run.settings(), regularizers=regs, where=run.where,
                      progress=progress, dist=dist)
    if progress and (dist is None or dist.is_main):
        losses = " -> ".join(f"{x:.3f}" for x in log.epoch_losses)
        tqdm.write(f"{run.where}: {log.examples} examples, {log.steps} steps, loss {losses}, {log.seconds:.1f}s"
                   + (f", {log.n_events} back-merges" if log.n_events else ""))
    if dist is None or not dist.distributed:
        return _store(run, model, log)
    cid = _store(run, model, log) if dist.is_main else None
    return cast(str, broadcast_object(cid, dist))  # the main rank's id, on every rank


def _store(run: StageRun, model: Any, log: StageLog) -> str:
    cfg, plan = run.cfg, run.plan
    model.to("cpu")
    ckpt = run.paradigm.save(model)
    coords = {"paradigm": plan.paradigm, "domain": plan.domain, "period": plan.stage, "variant": run.variant.name}
    parents = [(plan.parent_id, "init" if plan.first else "previous_stage")]
    return run.registry.put(
        {k: v.detach().cpu().contiguous() for k, v in ckpt.state.items()}, coords, "trained", parents=parents,
        params=stage_params(cfg, run.variant, plan.paradigm, plan.stage), files=ckpt.files,
        meta=checkpoint_meta(ckpt, {"train_log": log.to_dict(), "base_id": run.base_id}),
        seed=plan.seed, config_hash=stage_config_hash(cfg, run.base_id, run.prepared.fingerprint),
        data_fingerprint=run.prepared.fingerprint,
    )


def _regularizers(run: StageRun, model: Any) -> list[Any]:
    """The variant's regularizer, its origin being the paradigm's initial (built) model."""
    variant = run.variant
    if variant.regularizer == "none":
        return []
    # the first stage has not trained yet: its start is the origin; later stages rebuild theta_init
    init_model = model if run.plan.first else run.initial_model()
    state = {n: p.detach().clone() for n, p in init_model.named_parameters()}
    added = run.paradigm.save(model).added_rows
    return [make_regularizer(variant.regularizer, variant.params, make_origin(model, state, added))]
