"""Base model factory: named tiny builders or a Hugging Face folder / id (see base.py)."""

from mmgrid.models.base import BaseBundle, bundle_from_files, bundle_from_registry, lm_batch, load_base
from mmgrid.models.builders import builder_names, get_builder, parse_builder, tiny_qwen3, tiny_qwen3_wide
from mmgrid.models.tokenizer import train_tokenizer

__all__ = [
    "BaseBundle",
    "builder_names",
    "bundle_from_files",
    "bundle_from_registry",
    "get_builder",
    "lm_batch",
    "load_base",
    "parse_builder",
    "tiny_qwen3",
    "tiny_qwen3_wide",
    "train_tokenizer",
]
