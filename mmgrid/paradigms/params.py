"""A paradigm's knobs: one typed declaration per paradigm (``paradigm_params.<name>`` of a grid).

Each paradigm declares its knobs as a frozen dataclass decorated with :func:`paradigm_knobs`,
one field per knob with its default, its accepted range, its meaning in one line and, for a knob
that training never reads, its use::

    @paradigm_knobs("sasrec")
    class SASRecKnobs(Knobs):
        hidden: int = knob(64, 1, MAX_WIDTH, "int", "embedding and block width")
        user_batch: int = knob(2048, 1, MAX_BATCH, "int", "histories scored per forward", use=EVAL)

(the merge methods' parameters and the regularizers' are declared the same way). The YAML
spelling is the field's name. From that one declaration come the defaults
(:meth:`Knobs.defaults`, what ``Paradigm.defaults`` was), the range table :data:`RANGES` that
the validation pass checks, and the typed object a paradigm reads (``p.max_history``, not
``p["max_history"]``), made by :meth:`Knobs.resolve`. A checkpoint stores its knobs as a plain
dict (:meth:`Knobs.to_dict`, in declaration order) and reads them back with :meth:`Knobs.resolve`.

A knob's use says whether it is part of a trained checkpoint's identity (:func:`training_params`,
what :func:`mmgrid.runtime.plan.stage_params` records):

* :data:`TRAIN` (the default): training reads it, so a new value is a new checkpoint;
* :data:`EVAL`: read only when a checkpoint is evaluated (ranking, grounding, batch sizes of
  scoring), so changing it re-evaluates the stored checkpoints and never retrains them;
* :data:`WHERE`: only says where files are kept (a cache folder), never what is computed.

When in doubt a knob is :data:`TRAIN`: a knob wrongly left in the identity costs a retrain, one
wrongly left out would reuse a checkpoint trained with another value.

A knob's range is ``(lo, hi, kind)`` with ``kind``

* ``"int"``: an integer in [lo, hi] (a bound of None is open-ended; every knob that sets an amount of
  work has an upper bound, one of :data:`MAX_HISTORY`, :data:`MAX_TOKENS`, :data:`MAX_BATCH`, ...);
* ``"float"``: a finite number in [lo, hi]; ``"float>"`` refuses lo itself (lo < v),
  ``"float<"`` refuses hi itself (v < hi);
* ``"bool"``: true or false (lo, hi unused);
* ``"str"``: a non-empty string; ``"str?"``: None or a non-empty string;
* ``"choice"``: one of the strings in the tuple ``lo``.

:func:`check_knobs` (run by the validation pass, :mod:`mmgrid.validate`, and by
:func:`resolve_params` for ``paradigm_params.<name>``) raises a ConfigError naming the
knob, the value, the accepted range and the fix. A knob class's ``cross_checks`` (collected
in :data:`CROSS_CHECKS`) hold the few rules that tie two knobs together.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Callable, ClassVar, TypeVar

from mmgrid.errors import ConfigError

Knob = tuple[Any, Any, str]
RANGE = "mmgrid_knob_range"  # a knob field's metadata keys
DOC = "mmgrid_knob_doc"
USE = "mmgrid_knob_use"

TRAIN, EVAL, WHERE = "train", "eval", "where"  # a knob's use (see the module docstring)
USES = (TRAIN, EVAL, WHERE)

# The upper bounds of the knobs that set an amount of work (history read, tokens generated, batch rows,
# candidate items, model width), generous for paper scale and checked by the validation pass before any
# work. A bound is validation, not identity: no stored id depends on it.
MAX_HISTORY = 4096  # history items read per example (SASRec reads up to 200)
MAX_TOKENS = 4096  # tokens of one title, item text or generated answer
MAX_BATCH = 1_000_000  # rows per forward (ranking batches; train.batch_size has the same bound)
MAX_ITEMS = 100_000_000  # items of a catalogue (sampled negatives, grounded candidates)
MAX_WIDTH = 65_536  # model width, codebook entries, SVD dimensions
MAX_DEPTH = 1024  # layers, attention heads, residual code levels
MAX_WINDOW = 100_000  # positions of a user's sequence (co-occurrence windows; data.max_history's bound)
MAX_RATIO = 100.0  # extra examples per example (semid's alignment tasks)

#: paradigm -> knob -> (lo, hi, kind), filled by :func:`paradigm_knobs` from each declaration.
RANGES: dict[str, dict[str, Knob]] = {}

#: paradigm -> [(rule on the resolved knobs as a dict, message when it fails)], from each declaration.
CROSS_CHECKS: dict[str, list[tuple[Any, str]]] = {}

#: paradigm -> its knob class.
KNOBS: dict[str, type["Knobs"]] = {}


def knob(default: Any, lo: Any = None, hi: Any = None, kind: str = "", doc: str = "", *, use: str = TRAIN) -> Any:
    """One knob: its default, accepted range ``(lo, hi, kind)``, meaning and use (:data:`TRAIN`,
    :data:`EVAL` or :data:`WHERE`; see the module docstring)."""
    if use not in USES:
        raise ValueError(f"knob use {use!r}: expected one of {USES}")
    return field(default=default, metadata={RANGE: (lo, hi, kind), DOC: doc, USE: use})


K = TypeVar("K", bound="Knobs")


@dataclass(frozen=True)
class Knobs:
    """Base of a paradigm's knob declaration (see the module docstring)."""

    paradigm: ClassVar[str] = ""
    cross_checks: ClassVar[list[tuple[Callable[[dict[str, Any]], bool], str]]] = []

    @classmethod
    def _knobs(cls) -> list[Field]:
        return [f for f in fields(cls) if RANGE in f.metadata]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every knob with its default, in declaration order."""
        return {f.name: f.default for f in cls._knobs() if f.default is not MISSING}

    @classmethod
    def ranges(cls) -> dict[str, Knob]:
        """Every knob's ``(lo, hi, kind)``."""
        return {f.name: f.metadata[RANGE] for f in cls._knobs()}

    @classmethod
    def docs(cls) -> dict[str, str]:
        """Every knob's one-line meaning."""
        return {f.name: f.metadata[DOC] for f in cls._knobs()}

    @classmethod
    def uses(cls) -> dict[str, str]:
        """Every knob's use (:data:`TRAIN`, :data:`EVAL` or :data:`WHERE`)."""
        return {f.name: f.metadata.get(USE, TRAIN) for f in cls._knobs()}

    @classmethod
    def resolve(cls: type[K], params: dict[str, Any] | None = None, where: str | None = None) -> K:
        """The knobs: the defaults overlaid with ``params``, checked (:func:`resolve_params`).

        Raises:
            ConfigError: an unknown knob, a wrongly typed value or one out of its range.
        """
        return cls(**resolve_params(params, cls.defaults(), where or f"paradigm_params.{cls.paradigm}"))

    def to_dict(self) -> dict[str, Any]:
        """A plain dict in declaration order (stored in a checkpoint's meta)."""
        return {f.name: getattr(self, f.name) for f in self._knobs()}


def paradigm_knobs(name: str) -> Callable[[type[K]], type[K]]:
    """Class decorator: make ``cls`` a frozen dataclass of paradigm ``name``'s knobs and enter its
    ranges and cross-checks into :data:`RANGES` and :data:`CROSS_CHECKS`."""

    def deco(cls: type[K]) -> type[K]:
        cls = dataclass(frozen=True)(cls)
        cls.paradigm = name
        KNOBS[name] = cls
        RANGES[name] = cls.ranges()
        if cls.cross_checks:
            CROSS_CHECKS[name] = list(cls.cross_checks)
        return cls

    return deco


def training_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """The knobs of ``paradigm_params.<name>`` that training reads (use :data:`TRAIN`), as the grid
    writes them (defaults are not filled in). A paradigm without a declaration (a plug-in) keeps
    every knob: nothing says which ones it reads."""
    cls = KNOBS.get(name)
    params = dict(params or {})
    if cls is None:
        return params
    uses = cls.uses()
    return {k: v for k, v in params.items() if uses.get(k, TRAIN) == TRAIN}


def describe(knob: Knob) -> str:
    """The accepted values of a knob, in words."""
    lo, hi, kind = knob
    if kind == "bool":
        return "true or false"
    if kind == "str":
        return "a non-empty string"
    if kind == "str?":
        return "null or a non-empty string"
    if kind == "choice":
        return "one of " + ", ".join(repr(c) for c in lo)
    what = "an integer" if kind == "int" else "a finite number"
    lo_s = None if lo is None else (f"> {lo:g}" if kind == "float>" else f">= {lo:g}")
    hi_s = None if hi is None else (f"< {hi:g}" if kind == "float<" else f"<= {hi:g}")
    return what + (" " + " and ".join(s for s in (lo_s, hi_s) if s) if lo_s or hi_s else "")


def accepts(knob: Knob, v: Any) -> bool:
    """Whether ``v`` lies in the knob's range (its type is checked by :func:`resolve_params`)."""
    lo, hi, kind = knob
    if kind == "bool":
        return isinstance(v, bool)
    if kind in ("str", "str?"):
        return (v is None and kind == "str?") or (isinstance(v, str) and v.strip() != "")
    if kind == "choice":
        return v in lo
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    if kind == "int" and v != int(v):
        return False
    if lo is not None and (v < lo or (kind == "float>" and v == lo)):
        return False
    return not (hi is not None and (v > hi or (kind == "float<" and v == hi)))


def check_knobs(name: str, params: dict[str, Any], where: str | None = None) -> None:
    """Raise ConfigError unless every knob of ``params`` (resolved: defaults overlaid) lies
    in its :data:`RANGES` row and the paradigm's :data:`CROSS_CHECKS` hold. A paradigm
    without a table (a plug-in) is not checked here."""
    table = RANGES.get(name)
    if table is None:
        return
    where = where or f"paradigm_params.{name}"
    for key, value in params.items():
        knob = table.get(key)
        if knob is not None and not accepts(knob, value):
            verdict = "is out of range" if knob[2] in ("int", "float", "float>", "float<") else "is not accepted"
            raise ConfigError(f"{where}.{key}: {value!r} {verdict}; accepted: {describe(knob)}. Fix the value "
                              "in the grid YAML (or the KEY=VALUE override).")
    for rule, msg in CROSS_CHECKS.get(name, []):
        if not rule(params):
            raise ConfigError(f"{where}: {msg.format(**params)}. Fix the values in the grid YAML (or the overrides).")


def resolve_params(params: dict[str, Any] | None, defaults: dict[str, Any], where: str) -> dict[str, Any]:
    """Defaults overlaid with ``params``; unknown keys, wrongly typed values and (for
    ``where = "paradigm_params.<name>"`` of a paradigm in :data:`RANGES`) values out of
    range raise ConfigError.

    Args:
        params: the grid's ``paradigm_params.<name>`` mapping (may be None or empty).
        defaults: every known key with its default value; the default's type is the schema
            (an int default accepts ints, a float default accepts ints and floats).
        where: config path for messages, e.g. ``paradigm_params.emb``.

    Returns:
        A new dict with every key of ``defaults``.
    """
    out = dict(defaults)
    for key, value in (params or {}).items():
        if key not in defaults:
            raise ConfigError(f"{where}.{key}: unknown parameter; known: {', '.join(sorted(defaults))}.")
        want = type(defaults[key])
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = defaults[key] is None or (isinstance(value, want) and isinstance(value, bool) == (want is bool))
        if not ok and want in (int, float) and isinstance(value, str) and _number(value) is not None:
            # YAML 1.1 reads 5e-2 (no decimal point) as a string; refused, never converted here, so that one
            # value has one spelling in the grid and in every id made from it
            raise ConfigError(
                f"{where}.{key}: {value!r} is read by YAML as a string, not a number; write it with a decimal "
                f"point (e.g. {_number(value)!r}) in the grid YAML (or the KEY=VALUE override)."
            )
        if not ok:
            raise ConfigError(
                f"{where}.{key}: expected {want.__name__}, got {value!r}; fix the value in the grid YAML."
            )
        out[key] = value
    prefix, _, name = where.rpartition(".")
    if prefix == "paradigm_params" and params:
        check_knobs(name, out, where)
    return out


def _number(text: str) -> float | None:
    """``text`` as a finite float when it spells one (``"5e-2"``), else None."""
    try:
        v = float(text.strip())
    except ValueError:
        return None
    return v if math.isfinite(v) else None
