"""The typed grid spec (foundation layer): one dataclass per YAML section, the grid that
holds them, ``load_grid`` and date parsing. Imports nothing of mmgrid but ``errors`` and
``configtools``, so every layer above may import it.

* :mod:`~mmgrid.config.grid` - :class:`GridConfig`, :func:`load_grid`, :func:`resolve_grid_path`;
* :mod:`~mmgrid.config.data` - ``data:`` and ``world:``; :mod:`~mmgrid.config.base` - ``base:``;
* :mod:`~mmgrid.config.train` - ``train:`` and ``variants:``; :mod:`~mmgrid.config.eval` - ``eval:``;
* :mod:`~mmgrid.config.sweeps` - ``sweeps:``; :mod:`~mmgrid.config.exec` - ``exec:``;
* :mod:`~mmgrid.config.dates` - ``YYYY-MM-DD`` to Unix milliseconds.
"""

from mmgrid.config.base import BaseConfig
from mmgrid.config.data import PAPER_PHASES, DataConfig, ItemTextConfig, PlantConfig, WorldConfig
from mmgrid.config.dates import parse_date_ms
from mmgrid.config.eval import EvalConfig
from mmgrid.config.exec import ExecConfig
from mmgrid.config.grid import GRIDS_DIR, GridConfig, grid_from_dict, load_grid, resolve_grid_path
from mmgrid.config.sweeps import CrossDomainSweepConfig, PredictLambdaConfig, SweepConfig, TemporalSweepConfig
from mmgrid.config.train import TrainConfig, VariantConfig

__all__ = [
    "GRIDS_DIR",
    "PAPER_PHASES",
    "BaseConfig",
    "CrossDomainSweepConfig",
    "DataConfig",
    "EvalConfig",
    "ExecConfig",
    "GridConfig",
    "ItemTextConfig",
    "PlantConfig",
    "PredictLambdaConfig",
    "SweepConfig",
    "TemporalSweepConfig",
    "TrainConfig",
    "VariantConfig",
    "WorldConfig",
    "grid_from_dict",
    "load_grid",
    "parse_date_ms",
    "resolve_grid_path",
]
