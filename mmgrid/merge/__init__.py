"""The merge engine: streaming, tensor-by-tensor model merging across the grid.

``merge(method, models, base=None, **params)`` returns a merged state dict;
``merge_to_file`` streams into a safetensors file; ``mmgrid.merge.interpolation``
prepares inputs once for lambda / alpha sweeps (MMGRid Eq. 7, 10); ``mmgrid.merge.recipe``
stores merges with lineage. Methods: ``mmgrid.merge.methods``; a method of one's own joins them
with ``register_method(cls)`` or an installed package's entry point (docs/extending.md), listed
by ``registered_methods()``.

Layout (imports point down this list): ``errors``, ``ops``, ``geometry``, ``pipeline``,
``tensors``, ``vocab`` (leaves) -> ``fastpass`` (the fast file pass) -> ``methods`` ->
``plan`` -> ``reference`` (the reference path) -> ``executor`` -> ``api`` ->
``interpolation``, ``inplace``, ``recipe``; ``lora`` (LoRA-to-LoRA merging) stands beside
``methods`` on ``ops`` and ``errors``. The ``mmgrid merge`` command is :mod:`mmgrid.cli.merge`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["merge", "merge_to_file", "merge_with_info", "TemporalSweep", "apply_inplace", "merge_lora", "extract_lora",
           "register_method", "get_method", "registered_methods", "method_names", "Method", "TensorView"]


def __getattr__(name: str) -> Any:
    # These modules import torch, and `mmgrid --help` imports this
    # package (for mmgrid.merge.errors) without merging anything.
    if name in ("merge", "merge_to_file", "merge_with_info"):
        from mmgrid.merge import api  # lazy: torch, see above

        return getattr(api, name)
    if name == "TemporalSweep":
        from mmgrid.merge import interpolation  # lazy: torch, see above

        return interpolation.TemporalSweep
    if name in ("register_method", "get_method", "registered_methods", "method_names", "Method", "TensorView"):
        from mmgrid.merge import methods  # lazy: torch, see above (the method registry, docs/extending.md)

        return getattr(methods, name)
    if name == "apply_inplace":
        from mmgrid.merge import inplace  # lazy: torch, see above

        return inplace.apply_inplace
    if name == "merge_lora":  # LoRA-to-LoRA merging (mmgrid.merge.lora)
        from mmgrid.merge.lora import merge_lora  # lazy: torch, see above

        return merge_lora
    if name == "extract_lora":  # a LoRA adapter from a full fine-tune (mmgrid.merge.lora.extract)
        from mmgrid.merge.lora import extract_lora  # lazy: torch, see above

        return extract_lora
    raise AttributeError(f"module 'mmgrid.merge' has no attribute {name!r}")
