"""A paradigm's knobs: ``paradigm_params.<name>`` overlaid on its defaults, checked against
them (names, types) and against the declarative range table :data:`RANGES`.

:data:`RANGES` has one line per knob of every paradigm's ``DEFAULTS``:
``knob: (lo, hi, kind)``, with ``kind``

* ``"int"``: an integer in [lo, hi] (a bound of None is open-ended);
* ``"float"``: a finite number in [lo, hi]; ``"float>"`` refuses lo itself (lo < v),
  ``"float<"`` refuses hi itself (v < hi);
* ``"bool"``: true or false (lo, hi unused);
* ``"str"``: a non-empty string; ``"str?"``: None or a non-empty string;
* ``"choice"``: one of the strings in the tuple ``lo``.

:func:`check_knobs` (run by the validation pass, :mod:`mmgrid.validate`, and by
:func:`resolve_params` for ``paradigm_params.<name>``) raises a ConfigError naming the
knob, the value, the accepted range and the fix. :data:`CROSS_CHECKS` holds the few rules
that tie two knobs together. tests/test_validate.py checks that every knob of every
registered paradigm has a row and that every default lies in its range: a new knob gets
its row here (one line) in the same change.
"""

from __future__ import annotations

import math
from typing import Any

from mmgrid.errors import ConfigError

Knob = tuple[Any, Any, str]

#: paradigm -> knob -> (lo, hi, kind); see the module docstring. One line per knob.
RANGES: dict[str, dict[str, Knob]] = {
    "text": {
        "embedder": (None, None, "str"),  # local sentence-transformers folder
        "embedder_device": (None, None, "str"),  # torch device of the embedder, e.g. cpu, cuda:0
        "embed_cache": (None, None, "str?"),  # folder for item-embedding safetensors, or None
        "max_history": (1, None, "int"),  # history titles in the prompt
        "max_title_tokens": (1, None, "int"),  # tokens per title
        "num_beams": (1, None, "int"),  # beam width of title generation
        "max_new_tokens": (0, None, "int"),  # 0 = the domain's longest title + 1
        "beam_combine": (("weighted", "best", "max"), None, "choice"),
        "beam_candidates": (0, None, "int"),  # nearest items kept per beam (0 = every item)
        "history_weight": (0, None, "float"),  # title similarity to the history
        "cooc_weight": (0, None, "float"),  # items that followed the history's items in training
        "cooc_window": (1, None, "int"),
        "collab_weight": (0, None, "float"),  # collaborative item embeddings vs the history
        "collab_dim": (1, None, "int"),
        "history_decay": (0, 1, "float>"),  # recency weight of the history terms, in (0, 1]
        "popularity_gamma": (0, None, "float"),  # 0 = no popularity injection
        "popularity_phases": (("last", "all"), None, "choice"),
        "exclude_history": (None, None, "bool"),
        "rank_batch": (1, None, "int"),  # histories per generate() call
    },
    "semid": {
        "embedder": (None, None, "str"),
        "embedder_device": (None, None, "str"),
        "embed_cache": (None, None, "str?"),
        "levels": (1, None, "int"),  # residual code levels
        "codebook_size": (2, None, "int"),  # entries per level: one entry cannot tell items apart
        "quantizer_seed": (0, None, "int"),
        "max_history": (1, None, "int"),
        "max_text_tokens": (1, None, "int"),
        "max_title_tokens": (1, None, "int"),
        "align_ratio": (0, None, "float"),  # alignment examples per seqrec example (0 = none)
        "codes": (("text", "collab", "fused"), None, "choice"),  # what the RQ codes quantize
        "collab_phases": (("first", "train"), None, "choice"),  # phases counted for co-occurrence
        "collab_dim": (1, None, "int"),  # SVD dimensions of the collaborative embedding
        "collab_window": (1, None, "int"),  # co-occurrence window (positions)
        "collab_weight": (0, 1, "float"),  # fused: the collaborative part's share of the squared norm
        "num_beams": (1, None, "int"),
        "exclude_history": (None, None, "bool"),
        "rank_batch": (1, None, "int"),
    },
    "emb": {
        "temperature": (0, None, "float>"),  # InfoNCE tau > 0
        "n_negatives": (-1, None, "int"),  # -1 = the whole catalog, 0 = in-batch targets only
        "max_item_tokens": (2, None, "int"),  # EOS included: at least one text token
        "max_history": (1, None, "int"),
        "exclude_history": (None, None, "bool"),
        "item_batch": (1, None, "int"),
        "user_batch": (1, None, "int"),
        "id_embeddings": (None, None, "bool"),  # a learned per-item vector added to the text embedding
        "id_scale": (0, None, "float>"),
    },
    "sasrec": {
        "hidden": (1, None, "int"),
        "layers": (0, None, "int"),  # 0 = embeddings only (an ablation)
        "heads": (1, None, "int"),  # must divide hidden (CROSS_CHECKS)
        "dropout": (0, 1, "float<"),  # a probability below 1
        "max_len": (1, None, "int"),
        "exclude_history": (None, None, "bool"),
        "item_bias": (None, None, "bool"),
        "user_batch": (1, None, "int"),
    },
}

#: paradigm -> [(rule on the resolved knobs, message when it fails)]
CROSS_CHECKS: dict[str, list[tuple[Any, str]]] = {
    "sasrec": [(lambda p: p["hidden"] % p["heads"] == 0,
                "hidden={hidden} is not divisible by heads={heads}; choose heads dividing hidden (e.g. heads=1)")],
}


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
        if not ok:
            raise ConfigError(
                f"{where}.{key}: expected {want.__name__}, got {value!r}; fix the value in the grid YAML."
            )
        out[key] = value
    prefix, _, name = where.rpartition(".")
    if prefix == "paradigm_params" and params:
        check_knobs(name, out, where)
    return out
