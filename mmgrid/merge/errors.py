"""Named errors of the merge engine (all are :class:`mmgrid.errors.MergeError`)."""

from __future__ import annotations

from mmgrid.errors import ConfigError, MergeError


class ShapeMismatchError(MergeError):
    """Inputs differ in architecture: a tensor's shape or dtype kind differs between models."""


class MissingTensorError(MergeError):
    """A tensor is present in one input (or the base) but not in another."""


class NonFiniteError(MergeError):
    """An input or a merged tensor holds NaN or Inf."""


class MergeParamError(MergeError, ConfigError):
    """A merge parameter is unknown, of the wrong type, or out of its range."""


class SourceError(MergeError):
    """A model source (path, registry id, state dict) cannot be opened."""


class MergekitRecipeError(MergeParamError):
    """A mergekit YAML recipe is malformed (the message names the key and the fix)."""


class MergekitUnsupportedError(MergekitRecipeError):
    """A mergekit recipe uses a feature mmgrid does not read (slices, token surgery...)."""
