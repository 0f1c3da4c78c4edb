"""The grid spec: one YAML file describes data, base model, paradigms, training, variants,
evaluation, sweeps and execution. Loaded with ``yaml.safe_load`` and validated against the
dataclasses below (and each section's own dataclass) before any job runs.

Example::

    cfg = load_grid("grids/demo.yaml", ["data.root=/data/amazon", "train.seed=1"])
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mmgrid.config.base import BaseConfig
from mmgrid.config.data import DataConfig, WorldConfig
from mmgrid.config.dates import parse_date_ms
from mmgrid.config.eval import EvalConfig
from mmgrid.config.exec import ExecConfig
from mmgrid.config.sweeps import SweepConfig
from mmgrid.config.train import TrainConfig, VariantConfig
from mmgrid.configtools import apply_overrides, build, load_yaml, stable_hash, to_dict
from mmgrid.errors import ConfigError

GRIDS_DIR = Path(__file__).resolve().parent.parent.parent / "grids"


@dataclass
class GridConfig:
    name: str  # names the grid; default output folders live under runs/<name>/
    data: DataConfig = field(default_factory=DataConfig)
    world: WorldConfig | None = None  # if set, `mmgrid demo` writes this synthetic world into data.root
    prepared: str | None = None  # prepared dataset folder (default runs/<name>/prepared)
    registry: str | None = None  # registry root (default runs/<name>/registry)
    base: BaseConfig = field(default_factory=BaseConfig)
    paradigms: list[str] = field(default_factory=lambda: ["text", "semid", "emb", "sasrec"])
    paradigm_params: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-paradigm knobs
    train: TrainConfig = field(default_factory=TrainConfig)
    variants: list[VariantConfig] = field(default_factory=lambda: [VariantConfig()])
    eval: EvalConfig = field(default_factory=EvalConfig)
    sweeps: SweepConfig = field(default_factory=SweepConfig)
    exec: ExecConfig = field(default_factory=ExecConfig)

    def __post_init__(self) -> None:
        self.prepared = self.prepared_dir
        self.registry = self.registry_root
        _check_phases(self.data.phases)
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ConfigError(f"variants: duplicate variant names {names}; each row of the grid needs its own name.")
        for stage in self.train.stages:
            if stage not in self.data.phases:
                raise ConfigError(
                    f"train.stages: {stage!r} is not a phase; phases are {list(self.data.phases)}."
                )
            if stage not in self.train.epochs:
                raise ConfigError(f"train.epochs: no epoch count for stage {stage!r}.")
        self.train.check_shared_stages()
        self.check_metrics()

    @property
    def registry_root(self) -> str:
        """The registry root: ``registry``, or its default ``runs/<name>/registry``."""
        return self.registry if self.registry is not None else f"runs/{self.name}/registry"

    @property
    def prepared_dir(self) -> str:
        """The prepared dataset folder: ``prepared``, or its default ``runs/<name>/prepared``."""
        return self.prepared if self.prepared is not None else f"runs/{self.name}/prepared"

    def metric_names(self) -> list[str]:
        """The metrics an evaluation records: recall@k and ndcg@k for every k of ``eval.ks``."""
        return [f"{m}@{k}" for k in self.eval.ks for m in ("recall", "ndcg")]

    def check_metrics(self) -> None:
        """Every metric a study is judged by must be one the evaluation records (else the study would run and
        then find no records)."""
        known = self.metric_names()
        for key, metric in (("sweeps.temporal.metric", self.sweeps.temporal.metric),
                            ("sweeps.cross_domain.metric", self.sweeps.cross_domain.metric)):
            if metric not in known:
                close = difflib.get_close_matches(metric, known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"{key}: {metric!r} is not a recorded metric; known (from eval.ks): "
                                  f"{', '.join(known)}.{hint}")

    def hash(self) -> str:
        """Hash of the whole spec (recorded in manifests)."""
        return stable_hash(self)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _check_phases(phases: dict[str, list[str | None]]) -> None:
    if not phases:
        raise ConfigError("data.phases: at least one phase is needed.")
    for name, b in phases.items():
        if not isinstance(b, (list, tuple)) or len(b) != 2:
            raise ConfigError(f"data.phases.{name}: expected [start, end] dates (use null for an open start).")
    # the windows of mmgrid.data.phases.phase_windows (the data layer sits above this one)
    windows = {name: tuple(None if d is None else parse_date_ms(d, f"data.phases.{name}[{i}]") for i, d in enumerate(b))
               for name, b in phases.items()}
    prev_end: int | None = None
    prev_name = None
    for name, (start, end) in windows.items():
        if start is not None and end is not None and start >= end:
            raise ConfigError(f"data.phases.{name}: start {phases[name][0]} is not before end {phases[name][1]}.")
        if prev_name is not None:
            if start is None or prev_end is None or start < prev_end:
                raise ConfigError(
                    f"data.phases: {name!r} starts before {prev_name!r} ends; phases must be listed in time order "
                    "without overlap."
                )
        prev_end, prev_name = end, name


def resolve_grid_path(path: str | Path) -> Path:
    """Find a grid YAML: as given, or by name in the packaged grids/ folder (``demo`` → grids/demo.yaml)."""
    p = Path(path)
    if p.exists():
        return p
    for cand in (GRIDS_DIR / p.name, GRIDS_DIR / f"{p.name}.yaml"):
        if cand.exists():
            return cand
    raise ConfigError(f"grid config {str(path)!r} not found (looked in the current folder and {GRIDS_DIR}).")


def load_grid(path: str | Path, overrides: list[str] | None = None) -> GridConfig:
    """Load and validate a grid YAML (safe_load only), applying ``key=value`` overrides.

    Args:
        path: file path, or a packaged grid name such as ``demo``.
        overrides: ``dotted.key=value`` strings; values are parsed as YAML scalars.

    Returns:
        The validated :class:`GridConfig`.
    """
    p = resolve_grid_path(path)
    try:
        raw = load_yaml(p.read_text(), str(p)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    except ValueError as exc:  # a value YAML takes for a date but is none, e.g. 2022-13-45
        raise ConfigError(f"{p}: a value looks like a date but is not one ({exc}); write dates as YYYY-MM-DD "
                          "or quote the value.") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the top level must be a mapping.")
    return build(GridConfig, apply_overrides(raw, overrides), where=str(p))


def grid_from_dict(data: dict[str, Any], where: str = "job") -> GridConfig:
    """The :class:`GridConfig` of ``GridConfig.to_dict()`` output: how a job (JSON-able
    kwargs, possibly on another machine) gets the typed grid back, validated once more."""
    return build(GridConfig, data, where=where)
