"""The table of studies: a study is a name, a function that runs it on a built grid and records
its results in the registry, and optionally a renderer of what it returned.

``mmgrid study NAME RUN`` runs any registered study on a run folder (or a grid): the built-in
ones (:data:`BUILTIN`: ``temporal``, ``cross-domain``, ``continual``, ``rolling``, each also a
``mmgrid sweep`` command with more options) and those of installed distributions (entry-point
group ``mmgrid.studies``; the entry point's name is the study's name and its value a
:class:`Study`) or of Python code (:func:`register_study`). See docs/extending.md.

A study's ``run(cfg, registry, options)`` takes the grid config, the opened registry and a
:class:`StudyOptions` (the prepared dataset, the executor, the ``--set KEY=VALUE`` parameters)
and records every number it computes with a recipe naming its inputs
(``registry.record_eval(..., recipe=..., extra={"study": NAME})``, docs/architecture.md, "a
study"), so that a second run reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from mmgrid.errors import ConfigError, PluginError
from mmgrid.plugins import GROUPS, PluginTable, Source

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.config import GridConfig

__all__ = ["BUILTIN", "STUDIES", "Study", "StudyOptions", "get_study", "register_study", "run_study", "study_names"]


@dataclass(frozen=True)
class StudyOptions:
    """What a study gets besides the grid and the registry.

    Attributes:
        prepared: the grid's prepared dataset (:func:`mmgrid.data.dataset.load_prepared`).
        executor: where its jobs run (None: in this process, in order).
        params: the study's own parameters (``--set KEY=VALUE``), as parsed YAML values.
    """

    prepared: Any
    executor: Any = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Study:
    """A registered study.

    Attributes:
        name: what ``mmgrid study NAME`` calls it.
        run: ``run(cfg, registry, options) -> result``: runs the study, records its results in the
            registry, returns what it computed.
        render: ``render(result) -> str``, the text printed after a run (None: a one-line summary).
        help: one line for ``mmgrid plugins``.
        params: the names ``--set`` may give (None: any).
    """

    name: str
    run: Callable[["GridConfig", Any, StudyOptions], Any]
    render: Callable[[Any], str] | None = None
    help: str = ""
    params: tuple[str, ...] | None = None


def _check_study(name: str, obj: Any, source: Source) -> None:
    if not isinstance(obj, Study):
        raise PluginError(f"study {name!r} of {source}: {obj!r} is not a mmgrid.sweep.studies.Study; point the "
                          "entry point at a Study(name, run, render) object (docs/extending.md).")
    if obj.name != name:
        raise PluginError(f"study {name!r} of {source}: the Study is named {obj.name!r}; the entry point's name "
                          "and the Study's name must be the same.")
    if not callable(obj.run) or (obj.render is not None and not callable(obj.render)):
        raise PluginError(f"study {name!r} of {source}: run (and render, when given) must be functions.")


STUDIES = PluginTable("study", GROUPS["study"], check=_check_study, defined_by=lambda study: getattr(study, "run", study))


def register_study(study: Study) -> Study:
    """Make ``study`` available as ``study.name``; PluginError when another source has that name."""
    return STUDIES.register(study.name, study)


def get_study(name: str) -> Study:
    """The study registered as ``name`` (UnknownNameError lists the known ones)."""
    return STUDIES.get(name)


def study_names() -> list[str]:
    """Every registered study name, sorted (built-in and every installed plugin)."""
    return STUDIES.names()


def run_study(name: str, cfg: "GridConfig", registry: Any, options: StudyOptions) -> tuple[Any, str]:
    """Run study ``name``; returns (its result, the rendered text).

    Raises:
        ConfigError: a ``--set`` parameter the study does not take (before any work).
    """
    study = get_study(name)
    if study.params is not None:
        bad = sorted(set(options.params) - set(study.params))
        if bad:
            raise ConfigError(f"mmgrid study {name}: --set {', '.join(bad)}: not a parameter of this study; it takes "
                              f"{', '.join(study.params) or 'none'}.")
    result = study.run(cfg, registry, options)
    text = study.render(result) if study.render is not None else f"study {name}: done, recorded in {registry.root}"
    return result, text


# ---- the built-in studies: each imports its module when it runs ---------------------------------


def _temporal(cfg: "GridConfig", registry: Any, options: StudyOptions) -> Any:
    from mmgrid.sweep.temporal import run_temporal  # lazy: the study modules import torch and pandas (~1-3.5 s)

    return run_temporal(cfg, registry, options.prepared, executor=options.executor)


def _cross_domain(cfg: "GridConfig", registry: Any, options: StudyOptions) -> Any:
    from mmgrid.sweep.crossdomain import run_cross_domain  # lazy: as _temporal

    return run_cross_domain(cfg, registry, options.prepared, executor=options.executor)


def _continual(cfg: "GridConfig", registry: Any, options: StudyOptions) -> Any:
    from mmgrid.sweep.continual import run_continual  # lazy: as _temporal

    return run_continual(cfg, registry, options.prepared, executor=options.executor)


def _rolling(cfg: "GridConfig", registry: Any, options: StudyOptions) -> Any:
    from mmgrid.sweep.rolling import run_rolling  # lazy: as _temporal

    return run_rolling(cfg, registry, options.prepared)


def _deployed(result: Any) -> str:
    return (f"rolling deployment over {len(result.windows)} windows recorded (`mmgrid sweep rolling` prints the "
            "table; `mmgrid report` has its section)")


def _recorded(result: Any) -> str:
    return "continual merging recorded (`mmgrid sweep continual` prints the table; `mmgrid report` tabulates it)"


def _rows(result: Any) -> str:
    return f"{len(result)} result rows recorded (`mmgrid query` lists them; `mmgrid report` tabulates them)"


BUILTIN = (
    Study("temporal", _temporal, _rows, "theta_t1 + lambda (theta_t2 - theta_t1) per domain (MMGRid Eq. 10); "
                                        "`mmgrid sweep temporal` prints lambda*", ()),
    Study("cross-domain", _cross_domain, _rows, "pairs x methods x bases x alpha (MMGRid Eq. 7-8); "
                                                "`mmgrid sweep cross-domain` prints the relative change", ()),
    Study("continual", _continual, _recorded, "lambda scaling vs continual merging (MagMax, OPCM, DOP); "
                                         "`mmgrid sweep continual` prints the table", ()),
    Study("rolling", _rolling, _deployed, "rolling deployment over the incremental periods", ()),
)
for _study in BUILTIN:
    register_study(_study)
