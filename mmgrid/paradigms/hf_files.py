"""A Hugging Face tokenizer and model config as a checkpoint's small files, and back (local files only)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.paradigms.errors import CheckpointMismatchError

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase


def tokenizer_files(tokenizer: "PreTrainedTokenizerBase") -> dict[str, bytes]:
    """The tokenizer as files (``tokenizer.json``, ``tokenizer_config.json``, ...) for a checkpoint,
    the same bytes whether it was trained or reloaded (:func:`mmgrid.models.tokenizer.tokenizer_files`)."""
    # lazy: mmgrid.models imports transformers (~1.2 s); sasrec never needs it
    from mmgrid.models.tokenizer import tokenizer_files as files_of

    return files_of(tokenizer)


def tokenizer_from_files(files: dict[str, bytes]) -> "PreTrainedTokenizerBase":
    """Rebuild a fast tokenizer from :func:`tokenizer_files` output (local files only)."""
    # lazy: transformers' classes cost ~1.2 s to import; sasrec never needs them
    from transformers import PreTrainedTokenizerFast

    if "tokenizer.json" not in files:
        raise CheckpointMismatchError(
            f"checkpoint has no tokenizer.json (files: {sorted(files)}); it was not saved by an LLM paradigm."
        )
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            if name.startswith("tokenizer") or name in ("special_tokens_map.json", "added_tokens.json"):
                (Path(tmp) / name).write_bytes(data)
        return PreTrainedTokenizerFast.from_pretrained(tmp, local_files_only=True)


def hf_config_file(config: Any) -> bytes:
    """An HF config as ``config.json`` bytes."""
    return config.to_json_string(use_diff=False).encode()


def hf_config_from_file(data: bytes) -> Any:
    """A Qwen3 (or other causal-LM) config back from ``config.json`` bytes (no hub access)."""
    # lazy: transformers' classes cost ~1.2 s to import; sasrec never needs them
    from transformers import AutoConfig

    d = json.loads(data)
    model_type = d.pop("model_type", "qwen3")
    return AutoConfig.for_model(model_type, **d)
