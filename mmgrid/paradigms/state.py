"""A model's tensors in and out of a checkpoint's flat state dict, with named errors on mismatch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import torch

from mmgrid.paradigms.errors import CheckpointMismatchError

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import DomainData


def module_state(module: torch.nn.Module, prefix: str, skip: Iterable[str] = ()) -> dict[str, torch.Tensor]:
    """A module's tensors under ``prefix``: detached, contiguous CPU copies (no shared storage).

    Args:
        module: the module whose ``state_dict`` is copied.
        prefix: prepended to every name, e.g. ``"item_llm."``.
        skip: names (without prefix) left out, e.g. a tied ``lm_head.weight``.
    """
    skip = set(skip)
    return {
        prefix + k: v.detach().to("cpu").contiguous().clone()
        for k, v in module.state_dict().items()
        if k not in skip and v.is_floating_point()
    }


def sub_state(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``state`` that start with ``prefix``, with the prefix removed."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def load_module_state(
    module: torch.nn.Module, state: dict[str, torch.Tensor], where: str, allow_missing: Iterable[str] = ()
) -> None:
    """Load ``state`` into ``module`` strictly (except ``allow_missing``), with a named error on mismatch.

    Tensors are cast to each parameter's dtype, so a merged float32 state loads into a
    bfloat16 model and vice versa.
    """
    own = module.state_dict()
    missing = sorted(set(own) - set(state) - set(allow_missing))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointMismatchError(
            f"{where}: checkpoint does not match the model: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}. Was it saved by this paradigm?"
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise CheckpointMismatchError(
                f"{where}: tensor {name!r} has shape {tuple(tensor.shape)} but the model expects "
                f"{tuple(own[name].shape)}; the checkpoint was made for another size or domain."
            )
    fixed = {k: v.to(own[k].dtype) for k, v in state.items()}
    module.load_state_dict(fixed, strict=False)


def check_n_items(meta: dict[str, Any], domain: "DomainData", paradigm: str) -> None:
    """Raise :class:`CheckpointMismatchError` if a checkpoint was made for a different catalog size."""
    n = meta.get("n_items")
    if n is not None and int(n) != int(domain.n_items):
        raise CheckpointMismatchError(
            f"{paradigm} checkpoint of domain {meta.get('domain')!r} has n_items={n}, but domain "
            f"{domain.name!r} has {domain.n_items} items; load it with the domain it was trained on."
        )
