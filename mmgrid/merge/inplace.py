"""Writing a merged state into a live torch module, in place: parameters and buffers keep
their storage, dtype and device, so an evaluation harness holding the module sees the
new weights at once (the one in-place apply of mmgrid: the sweeps, the temporal study's
interpolator and the cross-domain study's evaluator use it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from mmgrid.merge.errors import MergeParamError


def apply_inplace(module: torch.nn.Module, state: Mapping[str, torch.Tensor] | Callable[[str], torch.Tensor],
                  names: list[str] | None = None, strict: bool = True) -> None:
    """Copy a merged state (a mapping, or a function name -> tensor) into ``module``.

    Parameters and buffers keep their storage, dtype and device (``copy_``), so an
    evaluation harness holding the module sees the new weights at once.

    Raises:
        MergeParamError: with ``strict``, a state tensor the module lacks.
    """
    targets = module_tensors(module)
    get = state if callable(state) else state.__getitem__
    keys = names if names is not None else list(state.keys())  # type: ignore[union-attr]
    with torch.no_grad():
        for name in keys:
            if name not in targets:
                if strict:
                    raise MergeParamError(f"the module has no parameter or buffer {name!r}; load the model the merge inputs came from")
                continue
            t = get(name)
            dst = targets[name]
            if tuple(dst.shape) != tuple(t.shape):
                raise MergeParamError(f"{name}: module has shape {tuple(dst.shape)}, merge gives {tuple(t.shape)}; rebuild the module for the merged vocabulary")
            dst.copy_(t)


def module_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's parameters and buffers by state-dict name."""
    # every name, tied weights included (state_dict names both ends of a tie)
    targets: dict[str, torch.Tensor] = dict(module.named_parameters(remove_duplicate=False))
    targets.update(dict(module.named_buffers(remove_duplicate=False)))
    return targets


def fits(module: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> bool:
    """Whether every tensor of ``state`` has a same-shaped parameter or buffer in ``module``."""
    targets = module_tensors(module)
    return all(name in targets and tuple(targets[name].shape) == tuple(t.shape) for name, t in state.items())


def apply_if_fits(module: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> bool:
    """:func:`apply_inplace` when the state :func:`fits` the module; else change nothing.

    Returns:
        False (nothing changed) when a name is missing or a shape differs (e.g. a merge
        that appended another domain's token rows): the caller then rebuilds the module.
    """
    if not fits(module, state):
        return False
    apply_inplace(module, state)
    return True
