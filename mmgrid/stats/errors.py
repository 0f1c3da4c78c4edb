"""The statistics layer's named error."""

from mmgrid.errors import MmgridError


class StatsError(MmgridError, ValueError):
    """Inputs a statistic cannot use (wrong shape, NaN, unknown test, bad coverage...): the message says which."""
