"""Where a grid's models are and what their ``config.json`` says, without loading a weight.

A grid names models in three places: ``base.model`` (a named tiny builder, a local Hugging Face
folder or a hub id in the local cache), ``base.tokenizer`` and each paradigm's ``embedder``
knob (a local sentence-transformers folder, or the offline default). :func:`model_config`
reads the architecture (the ``config.json``) of the first two, :func:`folder_problems` says what
a folder lacks (config, weights, tokenizer files), and :func:`shape_of` turns a config into the
few numbers a cost estimate needs. Nothing here opens a network connection or reads a weight.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmgrid.errors import ConfigError
from mmgrid.models.base import TOKENIZER_FILES
from mmgrid.models.builders import get_builder, parse_builder

# The published config.json of hub models the packaged grids name, so that a plan can be costed
# before the model is downloaded (values from the model's config.json on the Hugging Face hub,
# https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json).
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-0.6B": {"vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 28,
                        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                        "intermediate_size": 3072, "max_position_embeddings": 40960,
                        "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
}
WEIGHT_SUFFIXES = (".safetensors",)


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen3 / Llama-style decoder that parameter counts and FLOPs need."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    max_positions: int
    tied: bool

    def layer_params(self) -> int:
        """One decoder layer: q, k, v, o projections, Qwen3's q/k norms, two RMSNorms, the SwiGLU MLP."""
        h, a, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * a + 2 * h * kv + a * h + 2 * self.head_dim + 2 * h + 3 * h * self.intermediate

    def params(self, extra_vocab: int = 0, lm_head: bool = True) -> int:
        """Every parameter: embeddings (``extra_vocab`` rows added), layers, final norm, LM head (its own
        rows unless tied; none with ``lm_head=False``)."""
        v = self.vocab + extra_vocab
        head = v * self.hidden if lm_head and not self.tied else 0
        return v * self.hidden + self.layers * self.layer_params() + self.hidden + head

    def flop_params(self, extra_vocab: int = 0, lm_head: bool = True) -> int:
        """The parameters that multiply each token (the N of ``6 N tokens``): the layers and the LM
        head, tied or not; not the input embedding, which is a lookup (Kaplan et al. 2020, section 2.1)."""
        head = (self.vocab + extra_vocab) * self.hidden if lm_head else 0
        return self.layers * self.layer_params() + self.hidden + head


def shape_of(config: dict[str, Any]) -> ModelShape:
    """A :class:`ModelShape` from a ``config.json`` mapping (Qwen3 / Llama / Mistral keys).

    Raises:
        ConfigError: a key it needs is missing or not a number.
    """
    try:
        return _shape(config)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"the model's config.json has no usable {exc} (a Qwen3 / Llama-style decoder config "
                          "needs vocab_size, hidden_size, num_hidden_layers, num_attention_heads, "
                          "intermediate_size).") from exc


def _shape(config: dict[str, Any]) -> ModelShape:
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    return ModelShape(vocab=int(config["vocab_size"]), hidden=hidden, layers=int(config["num_hidden_layers"]),
                      heads=heads, kv_heads=int(config.get("num_key_value_heads") or heads),
                      head_dim=int(config.get("head_dim") or hidden // heads),
                      intermediate=int(config["intermediate_size"]),
                      max_positions=int(config.get("max_position_embeddings") or 0),
                      tied=bool(config.get("tie_word_embeddings", False)))


def hub_cache_file(repo: str, filename: str) -> Path | None:
    """``filename`` of hub model ``repo`` in the local Hugging Face cache (no network), or None."""
    # lazy: huggingface_hub (~0.2 s) is only needed for a hub id
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo, filename)
    except Exception:  # noqa: BLE001 - a malformed id or cache answers "not cached"
        return None
    return Path(hit) if isinstance(hit, str) and os.path.isfile(hit) else None


def model_config(spec: str, vocab_size: int | None = None) -> tuple[dict[str, Any] | None, str]:
    """The ``config.json`` of ``base.model`` and where it came from: a named builder (its literal
    sizes, at ``vocab_size``), a local folder, the local hub cache, or :data:`KNOWN_CONFIGS`
    (the published one, the model not being here); ``(None, reason)`` when none is found."""
    name = parse_builder(spec)
    if name is not None:
        # lazy: torch (~1 s) only to build the tiny model on the meta device (no memory)
        import torch

        with torch.device("meta"):
            model = get_builder(name)(vocab_size) if vocab_size else get_builder(name)()
        return model.config.to_dict(), f"builder {spec}"
    folder = Path(spec).expanduser()
    if folder.is_dir():
        try:
            return json.loads((folder / "config.json").read_text()), f"folder {folder}"
        except (OSError, ValueError) as exc:
            return None, f"{folder}/config.json cannot be read ({exc})"
    cached = hub_cache_file(spec, "config.json")
    if cached is not None:
        return json.loads(cached.read_text()), f"hub cache {cached.parent}"
    if spec in KNOWN_CONFIGS:
        return dict(KNOWN_CONFIGS[spec]), f"the published config of {spec} (not downloaded)"
    return None, f"{spec} is neither a builder, a folder nor in the local Hugging Face cache"


def folder_problems(folder: Path, *, tokenizer: bool, weights: bool, sentence: bool = False) -> list[str]:
    """What a model folder lacks: a readable ``config.json`` (or ``modules.json`` for a
    sentence-transformers folder), safetensors weights (``weights``), tokenizer files
    (``tokenizer``). Empty when it looks complete. Nothing is loaded."""
    if not folder.is_dir():
        return [f"{folder} is not a folder"]
    out = []
    configs = [folder / "config.json"] + ([folder / "modules.json"] if sentence else [])
    readable = False
    for c in configs:
        if c.is_file():
            try:
                json.loads(c.read_text())
                readable = True
            except (OSError, ValueError) as exc:
                out.append(f"{c} cannot be read ({exc})")
    if not readable and not out:
        out.append(f"{folder} has no {' or '.join(c.name for c in configs)}")
    if weights and not any(p.name.endswith(WEIGHT_SUFFIXES) for p in folder.rglob("*") if p.is_file()):
        out.append(f"{folder} has no safetensors weights (*.safetensors); mmgrid reads no pickled weights")
    if tokenizer and not any((folder / f).is_file() for f in TOKENIZER_FILES):
        out.append(f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    return out
