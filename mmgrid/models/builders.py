"""Named tiny base builders with literal sizes.

A grid YAML names a builder as ``base.model: tiny_qwen3()``; :func:`get_builder` is the
one place that knows them all. Each builder returns a freshly initialised
``transformers.Qwen3ForCausalLM`` with small literal sizes, so that the whole demo grid
trains on two CPU cores in minutes.
"""

from __future__ import annotations

import re
from typing import Protocol

from transformers import Qwen3Config, Qwen3ForCausalLM

from mmgrid.errors import UnknownNameError


class Builder(Protocol):
    """A base builder: the model of a vocabulary size, or of the builder's default size."""

    __name__: str

    def __call__(self, vocab_size: int = ...) -> Qwen3ForCausalLM: ...


_BUILDERS: dict[str, Builder] = {}
_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*\)\s*$")


def register_builder(fn: Builder) -> Builder:
    """Make ``fn`` available as ``base.model: <name>()``."""
    _BUILDERS[fn.__name__] = fn
    return fn


def _qwen3(vocab_size: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
           intermediate: int, max_positions: int) -> "Qwen3ForCausalLM":
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        # Untied: every tensor has its own storage, so safetensors and the merge engine
        # never meet shared weights (Qwen3-0.6B ties them; the registry handles both).
        tie_word_embeddings=False,
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return Qwen3ForCausalLM(cfg)


@register_builder
def tiny_qwen3(vocab_size: int = 2048) -> "Qwen3ForCausalLM":
    """Qwen3 architecture, 2 layers of width 64 (~0.35M parameters at vocab 2048).

    Args:
        vocab_size: rows of the embedding / LM head (the trained tokenizer's size).
    """
    return _qwen3(vocab_size, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                  intermediate=128, max_positions=512)


@register_builder
def tiny_qwen3_wide(vocab_size: int = 4096) -> "Qwen3ForCausalLM":
    """Qwen3 architecture, 4 layers of width 128: a slower, more capable tiny base."""
    return _qwen3(vocab_size, hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32,
                  intermediate=256, max_positions=512)


def builder_names() -> list[str]:
    """Names usable as ``base.model: <name>()``."""
    return sorted(_BUILDERS)


def parse_builder(spec: str) -> str | None:
    """``"tiny_qwen3()"`` -> ``"tiny_qwen3"``; anything not of the form ``name()`` -> None."""
    m = _CALL.match(spec)
    return m.group(1) if m else None


def get_builder(name: str) -> Builder:
    """The builder registered as ``name`` (UnknownNameError lists the known ones)."""
    if name not in _BUILDERS:
        raise UnknownNameError("base builder", f"{name}()", [f"{n}()" for n in _BUILDERS])
    return _BUILDERS[name]
