"""Stage identity and the grid plan: every checkpoint id of a grid, known before anything trains.

A stage's id is ``Registry.make_id`` over its coordinates, its parent (the base's id, itself a
function of the base model and the prepared data's content), its training parameters
(:func:`stage_params`: the ``train`` settings and the paradigm's *training* knobs; knobs read
only at evaluation are left out, as declared with each knob, :mod:`mmgrid.paradigms.params`),
a hash of the config parts it depends on (:func:`stage_config_hash`: the base id, the prepared
data's content fingerprint, the stages, the identity version :data:`IDENTITY_VERSION`) and its
training seed. Nothing in it spells a path: the data settings enter only through the content
fingerprint (:attr:`mmgrid.data.dataset.PreparedDataset.fingerprint`), so ``data.root`` written
relative or absolute, through a symlink or on another disk gives the same ids.
The build plans every id up front with :func:`plan_stages` and the stage job stores its
checkpoint under the same identity; evaluation and the studies find a built grid's ids with
:func:`plan_grid` without training anything.

Identity version 1 (before ids were a function of content: the data settings as spelled,
``data.root`` included, and every paradigm knob) is kept in :func:`legacy_stage_plans`, for
``mmgrid registry remap-ids``, which maps checkpoints stored under it onto today's ids.

Training seeds (``train.seeds``, else ``[train.seed]``) are a grid coordinate: every stage
of the ``default``-like rows (variants without a regularizer) is planned once per seed,
each replicate with its own ids (the seed is part of the identity, so a one-seed grid keeps
the ids it had before seeds existed). What is shared across seeds: the tiny base (trained
with the first seed), the stages of ``train.shared_stages`` (e.g. pretrain: trained with the
first seed, every replicate continues from that checkpoint, so its later ids name it as
parent) and, for evaluation, the user sample (seeded with the first seed).
Variants with a regularizer (the Orbit Pareto rows) train on the first seed only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mmgrid.configtools import stable_hash
from mmgrid.errors import DataError, MmgridError, RegistryError, UnknownNameError
from mmgrid.models.base import base_checkpoint_id
from mmgrid.paradigms import get_paradigm, paradigm_names
from mmgrid.paradigms.params import training_params
from mmgrid.runtime.context import open_prepared, open_registry

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry


@dataclass(frozen=True)
class StagePlan:
    variant: str
    paradigm: str
    domain: str
    stage: str
    id: str
    parent_id: str
    first: bool
    seed: int = 0  # the training seed of this replicate


@dataclass
class BuildResult:
    """Ids of the base and of every stage, and what this run trained."""

    base_id: str
    stages: list[StagePlan] = field(default_factory=list)
    trained: list[str] = field(default_factory=list)  # ids trained by this call
    cached: list[str] = field(default_factory=list)  # ids already in the registry
    seconds: float = 0.0

    @property
    def seeds(self) -> list[int]:
        """The training seeds planned, first seed first."""
        return list(dict.fromkeys(s.seed for s in self.stages))

    @property
    def ids(self) -> dict[tuple[str, str, str, str], str]:
        """(variant, paradigm, domain, stage) -> id of the first seed's replicate."""
        first = self.seeds[:1]
        return {(s.variant, s.paradigm, s.domain, s.stage): s.id for s in self.stages if s.seed in first}

    @property
    def seed_ids(self) -> dict[tuple[int, str, str, str, str], str]:
        """(seed, variant, paradigm, domain, stage) -> id, every replicate."""
        return {(s.seed, s.variant, s.paradigm, s.domain, s.stage): s.id for s in self.stages}

    def id_of(self, paradigm: str, domain: str, stage: str, variant: str = "default",
              seed: int | None = None) -> str | None:
        """The planned id of one stage (of ``seed``'s replicate; default the first seed), None when
        the plan has no such stage (not in the grid; for :func:`plan_grid`, not stored; a further
        seed's stage of ``train.shared_stages``, which is the first seed's)."""
        seeds = self.seeds
        if not seeds:
            return None
        return self.seed_ids.get((seeds[0] if seed is None else int(seed), variant, paradigm, domain, stage))

    @property
    def id_set(self) -> set[str]:
        """Every planned stage id (and the base's)."""
        return {self.base_id, *(s.id for s in self.stages)}

    def final_ids(self, variant: str = "default", seed: int | None = None) -> dict[tuple[str, str], str]:
        """(paradigm, domain) -> id of the last stage of ``variant`` (of ``seed``; default the first seed)."""
        seed = self.seeds[0] if seed is None and self.stages else seed
        last: dict[tuple[str, str], str] = {}
        for s in self.stages:
            if s.variant == variant and s.seed == seed:
                last[(s.paradigm, s.domain)] = s.id
        return last


#: The version of how a stage's identity is computed; 2: from content (the prepared data's content
#: fingerprint, training knobs only); 1 (no field): the data settings as spelled and every knob.
IDENTITY_VERSION = 2


def stage_params(cfg: GridConfig, variant: Any, paradigm: str, stage: str) -> dict[str, Any]:
    """The training parameters of one stage (part of its id and lineage): the ``train`` settings
    and the paradigm's training knobs (:func:`mmgrid.paradigms.params.training_params`)."""
    paradigm_names()  # every paradigm module loaded: its knob declaration says which knobs training reads
    return {**_stage_params_v1(cfg, variant, paradigm, stage),
            "paradigm_params": training_params(paradigm, cfg.paradigm_params.get(paradigm, {}))}


def _stage_params_v1(cfg: GridConfig, variant: Any, paradigm: str, stage: str) -> dict[str, Any]:
    """Identity version 1's training parameters: every knob of ``paradigm_params.<paradigm>``."""
    t = cfg.train
    return {
        "stage": stage,
        "epochs": t.epochs[stage],
        "lr": t.lr,
        "weight_decay": t.weight_decay,
        "batch_size": t.batch_size,
        "max_examples": t.max_examples,
        "regularizer": variant.regularizer,
        "regularizer_params": dict(variant.params),
        "paradigm_params": dict(cfg.paradigm_params.get(paradigm, {})),
        **_train_version(paradigm),
    }


def _train_version(paradigm: str) -> dict[str, int]:
    """``{"train_version": v}`` for a paradigm whose training computes differently from its first
    version (e.g. length-bucketed batches: text and semid, version 2), so that its checkpoints get
    new ids; empty for version 1, which keeps the ids of checkpoints stored before versions existed."""
    try:
        version = int(getattr(get_paradigm(paradigm), "train_version", 1) or 1)
    except UnknownNameError:
        return {}  # validation names unknown paradigms; the plan does not
    return {"train_version": version} if version > 1 else {}


def stage_config_hash(cfg: GridConfig, base_id: str, fingerprint: str) -> str:
    """Hash of the config parts a stage depends on: the base, the prepared data's content
    fingerprint (which holds every data setting that shapes the examples: phases, k-core,
    ``max_history``, item text...; never ``data.root``), the stages and :data:`IDENTITY_VERSION`.
    The eval / sweeps / exec sections and every path are left out."""
    return stable_hash({"base": base_id, "data": fingerprint, "stages": list(cfg.train.stages),
                        "identity": IDENTITY_VERSION})


def _stage_config_hash_v1(cfg: GridConfig, base_id: str, fingerprint: str, data_cfg: dict[str, Any]) -> str:
    """Identity version 1's config hash: the data settings as spelled (``data.root`` included)."""
    return stable_hash({"base": base_id, "data": fingerprint, "data_cfg": data_cfg, "stages": list(cfg.train.stages)})


@dataclass(frozen=True)
class _Identity:
    """How one plan's ids are computed (today's, or identity version 1 for the remap)."""

    chash: str
    params: Any  # (cfg, variant, paradigm, stage) -> params


def plan_stages(cfg: GridConfig, registry: Registry, base_id: str, domains: list[str], fingerprint: str) -> list[StagePlan]:
    """Every stage of the grid with its id, in an order where parents come first: the first
    seed's whole grid, then each further seed's (variants with a regularizer: first seed only).
    A further seed's chain starts from the first seed's checkpoint of the last stage in
    ``train.shared_stages`` (none of its own is planned for those stages)."""
    return _plan(cfg, registry, base_id, domains, _Identity(stage_config_hash(cfg, base_id, fingerprint), stage_params))


def legacy_stage_plans(cfg: GridConfig, registry: Registry, base_id: str, domains: list[str], fingerprint: str,
                       data_cfg: dict[str, Any]) -> list[StagePlan]:
    """The stages' ids under identity version 1, with the old base id ``base_id``, the prepared
    data's old fingerprint (:attr:`~mmgrid.data.dataset.PreparedDataset.path_fingerprint`) and the
    data settings as the build spelled them (``data_cfg``, ``to_dict(cfg.data)`` of that build)."""
    ident = _Identity(_stage_config_hash_v1(cfg, base_id, fingerprint, data_cfg), _stage_params_v1)
    return _plan(cfg, registry, base_id, domains, ident)


def _plan(cfg: GridConfig, registry: Registry, base_id: str, domains: list[str], ident: _Identity) -> list[StagePlan]:
    chash = ident.chash
    plans = []
    seeds = cfg.train.seed_list
    shared = set(getattr(cfg.train, "shared_stages", None) or [])
    first_seed: dict[tuple[str, str, str, str], str] = {}  # (variant, paradigm, domain, stage) -> first seed's id
    for seed in seeds:
        for variant in cfg.variants:
            if seed != seeds[0] and not seeds_all(variant):
                continue
            for paradigm in variant.paradigms or cfg.paradigms:
                for domain in domains:
                    parent, first = base_id, True
                    for stage in cfg.train.stages:
                        key = (variant.name, paradigm, domain, stage)
                        if seed != seeds[0] and stage in shared:  # train.shared_stages: the first seed's checkpoint
                            parent, first = first_seed[key], False
                            continue
                        coords = {"paradigm": paradigm, "domain": domain, "period": stage, "variant": variant.name}
                        parents = [(parent, "init" if first else "previous_stage")]
                        sid = registry.make_id(coords, "trained", parents, ident.params(cfg, variant, paradigm, stage),
                                               chash, seed)
                        plans.append(StagePlan(variant.name, paradigm, domain, stage, sid, parent, first, seed))
                        if seed == seeds[0]:
                            first_seed[key] = sid
                        parent, first = sid, False
    return plans


def seeds_all(variant: Any) -> bool:
    """Is this variant trained on every seed? Rows without a regularizer are; the regularizer rows
    (the Orbit Pareto plot's) train on the first seed only, to keep the demo's budget."""
    return variant.regularizer == "none"


def grid_domains(cfg: GridConfig, prepared: PreparedDataset) -> list[str]:
    """The grid's domains: ``data.domains`` (checked against the prepared data), else all prepared ones."""
    have = list(prepared.domains)
    if not cfg.data.domains:
        return have
    missing = [d for d in cfg.data.domains if d not in have]
    if missing:
        raise DataError(f"data.domains: {missing} are not in the prepared dataset {cfg.prepared} (it has {have}); "
                        "run `mmgrid prepare` again or fix data.domains.")
    return list(cfg.data.domains)


def plan_grid(cfg: GridConfig, registry: Registry | None = None, prepared: PreparedDataset | None = None) -> BuildResult:
    """The grid's ids without training anything (for evaluating a built grid): the stages
    already stored, all of them ``cached``.

    Raises:
        RegistryError: the base is not in the registry yet (run ``mmgrid build`` first).
    """
    prepared = prepared if prepared is not None else open_prepared(cfg.prepared_dir)
    registry = registry if registry is not None else open_registry(cfg.registry_root)
    bid = base_checkpoint_id(cfg.base, registry, prepared.fingerprint, cfg.train.seed)
    if not registry.has(bid):
        raise RegistryError(f"registry {cfg.registry} has no base for this grid; run `mmgrid build` first.")
    plans = plan_stages(cfg, registry, bid, grid_domains(cfg, prepared), prepared.fingerprint)
    done = [p for p in plans if registry.has(p.id)]
    return BuildResult(bid, done, cached=[p.id for p in done])


def planned_ids(cfg: GridConfig, registry: Registry | None = None, prepared: PreparedDataset | None = None) -> BuildResult | None:
    """:func:`plan_grid`, or None where the grid cannot be planned here (no base stored, no
    prepared data, a stand-in registry): the studies and reports then pick checkpoints by their
    coordinates, as for checkpoints put by hand or imported."""
    try:
        return plan_grid(cfg, registry, prepared)
    except (MmgridError, OSError, KeyError, AttributeError, TypeError):
        return None
