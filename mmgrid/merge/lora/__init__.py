"""LoRA extraction from full fine-tunes (:mod:`mmgrid.merge.lora.extract`) and LoRA-to-LoRA merging: several PEFT LoRA adapters into one LoRA adapter.

No base model is read and nothing is merged into a base. For every target module m and
adapter i the low-rank update is (LoRA, Hu et al. 2021, Eq. 3; rsLoRA, Kalajdzievski 2023)

    delta_i = s_i B_i A_i,   s_i = alpha_i / r_i   (alpha_i / sqrt(r_i) with use_rslora)

with alpha_i and r_i taken from ``alpha_pattern`` / ``rank_pattern`` where they match
the module, as PEFT does. The products are combined as task vectors:

* ``task_arithmetic`` (Ilharco et al. 2023; MMGRid Eq. 3):
  delta = scale * sum_i w_i delta_i (weights default 1.0 each);
* ``ties`` (Yadav et al. 2023, per tensor): trim each delta_i to its top ``density``
  fraction by magnitude; elect the sign gamma = sign(sum_i TRIM(delta_i)) on the
  *unweighted* trimmed vectors as the paper does (``sign_rule="weighted"``: sign of
  sum_i w_i TRIM(delta_i), mergekit's rule); disjoint mean
  sum_i w_i TRIM(delta_i) [agrees] / sum_i w_i [agrees] (equal weights: the paper's
  mean over agreeing inputs); times ``scale`` (the paper's lambda).

The combined delta is re-factorised by truncated SVD, delta ~ U_r S_r V_r^T (best rank-r
approximation, Eckart-Young: ||delta - U_r S_r V_r^T||_F^2 = sum_{j>r} sigma_j^2), and
written as B' = U_r sqrt(S_r), A' = sqrt(S_r) V_r^T with lora_alpha = r, so PEFT's
scaling is 1 and B'A' is the merged update itself. For task arithmetic the SVD is taken
through QR of the stacked factors [w_i s_i B_i] and [A_i] (exact, cheap: the product has
rank <= sum_i r_i); for TIES, whose trimming makes the product dense, through the
eigenvectors of the dense delta's smaller Gram matrix in float64 (the same truncation,
3-5x cheaper than a float64 SVD). The relative reconstruction error ||delta - B'A'||_F / ||delta||_F is measured on
the factors as written (in the output dtype) per module and over all modules.

Modules are processed one at a time: only one module's factors (and for TIES its N
dense products) are in memory at once, combined in float32 (TIES) or float64 (task
arithmetic's stacked factors), factorised in float64; the output factors take the
inputs' dtype. The output adapter itself (about the size of one input) is kept until
it is written, after every module has been merged and checked. Only ``adapter_model.safetensors`` is read;
a folder with only a pickle (``adapter_model.bin``) is refused.
"""

# Names resolved on first use (PEP 562): importing this package, e.g. while `mmgrid --help`
# builds the parser, must not import torch.
_HOMES = {
    "AdapterFormatError": "adapters", "AdapterMismatchError": "adapters", "UnsafeAdapterError": "adapters",
    "check_compatible": "adapters", "lora_scaling": "adapters", "read_adapter": "adapters",
    "LoraExtractReport": "extract", "apply_lora": "extract", "extract_lora": "extract", "store_applied": "extract",
    "LoraMergeReport": "merging", "merge_lora": "merging",
}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib  # lazy: the submodules import torch (see _HOMES)

        return getattr(importlib.import_module(f"mmgrid.merge.lora.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'mmgrid.merge.lora' has no attribute {name!r}")


__all__ = [
    "AdapterFormatError",
    "AdapterMismatchError",
    "LoraExtractReport",
    "LoraMergeReport",
    "apply_lora",
    "UnsafeAdapterError",
    "check_compatible",
    "extract_lora",
    "lora_scaling",
    "merge_lora",
    "read_adapter",
    "store_applied",
]
