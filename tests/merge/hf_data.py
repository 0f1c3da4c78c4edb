"""Tiny Qwen3 checkpoints as HF folders, built on the fly (nothing from a hub): the
tensor names and config.json of ``Qwen3ForCausalLM``, so mergekit reads them too."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

HIDDEN, INTER, HEADS, KV, HEAD_DIM, VOCAB, LAYERS = 16, 32, 2, 1, 8, 64, 3


def qwen3_config(layers: int = LAYERS) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
            "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM,
            "num_hidden_layers": layers, "vocab_size": VOCAB, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu",
            "attention_bias": False, "bos_token_id": 0, "eos_token_id": 1}


def qwen3_state(seed: int, base: dict | None = None, noise: float = 0.05, layers: int = LAYERS) -> dict:
    """Random weights (seeded), or ``base`` plus seeded noise of size ``noise``."""
    g = torch.Generator().manual_seed(seed)
    if base is not None:
        return {k: v + noise * torch.randn(v.shape, generator=g) for k, v in base.items()}
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN), p + "self_attn.k_proj.weight": (KV * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": (KV * HEAD_DIM, HIDDEN), p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            p + "self_attn.q_norm.weight": (HEAD_DIM,), p + "self_attn.k_norm.weight": (HEAD_DIM,),
            p + "mlp.gate_proj.weight": (INTER, HIDDEN), p + "mlp.up_proj.weight": (INTER, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTER), p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,)})
    return {k: torch.randn(s, generator=g) * 0.1 for k, s in shapes.items()}


def write_folder(path: Path, state: dict, shards: int = 1, tokenizer: str | None = None, layers: int = LAYERS) -> Path:
    """An HF folder: config.json, the weights (``shards`` > 1: sharded with the index),
    and, with ``tokenizer``, a tokenizer_config.json holding that marker."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(qwen3_config(layers)))
    if tokenizer is not None:
        (path / "tokenizer_config.json").write_text(json.dumps({"marker": tokenizer}))
    names = list(state)
    if shards == 1:
        save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"), metadata={"format": "pt"})
        return path
    per = -(-len(names) // shards)
    wmap = {}
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: state[k].contiguous() for k in names[i * per:(i + 1) * per]}
        save_file(part, str(path / fname), metadata={"format": "pt"})
        wmap.update({k: fname for k in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    return path


def read_folder(path: Path) -> dict:
    """All tensors of an HF folder (single file or sharded)."""
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(load_file(str(path / f)))
    return out
