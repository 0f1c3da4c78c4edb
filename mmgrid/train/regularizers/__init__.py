"""Training-time regularizers towards the origin: one small module each, one lookup.

A regularizer is built from the variant's ``params`` (validated against its typed
dataclass before any job runs) and the run's :class:`~mmgrid.train.origin.Origin`, and
has one narrow hook, ``on_step_end(model, step) -> dict`` (called after every optimizer
step; returns values to log). ``l2_init`` also adds ``penalty(model)`` to the loss.

The name table lives in :mod:`~mmgrid.train.regularizers.names`; importing this package
imports every regularizer module, so each has registered itself.
"""

from mmgrid.train.regularizers import l2_init, orbit, soup_to_go  # noqa: F401  (they register)
from mmgrid.train.regularizers.names import (Regularizer, check_params, get_regularizer_class, make_regularizer,
                                             register, regularizer_names)

__all__ = ["Regularizer", "check_params", "get_regularizer_class", "make_regularizer", "register",
           "regularizer_names"]
