"""The merge engine: streaming, tensor-by-tensor model merging across the grid.

``merge(method, models, base=None, **params)`` returns a merged state dict;
``merge_to_file`` streams into a safetensors file; ``mmgrid.merge.sweep`` prepares
inputs once for lambda / alpha sweeps; ``mmgrid.merge.recipe`` stores merges with
lineage. Methods: ``mmgrid.merge.methods``. Heavy imports happen on first use so that
``mmgrid --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["merge", "merge_to_file", "merge_with_info", "TemporalSweep", "AlphaSweep", "apply_inplace", "merge_lora"]


def __getattr__(name: str) -> Any:
    if name in ("merge", "merge_to_file", "merge_with_info"):
        from mmgrid.merge import api

        return getattr(api, name)
    if name in ("TemporalSweep", "AlphaSweep", "apply_inplace"):
        from mmgrid.merge import sweep

        return getattr(sweep, name)
    if name == "merge_lora":  # LoRA-to-LoRA merging (mmgrid.merge.lora)
        from mmgrid.merge.lora import merge_lora

        return merge_lora
    raise AttributeError(f"module 'mmgrid.merge' has no attribute {name!r}")
