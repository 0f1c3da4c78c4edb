"""Byte-level BPE tokenizer trained on the grid's item text (tiny bases only)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from mmgrid.errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase

# Ids 0/1/2 are fixed so that tiny_qwen3's config (pad 0, bos 1, eos 2) matches.
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>"]

# Keys ``from_pretrained`` adds to a tokenizer's init kwargs, which ``save_pretrained`` then
# writes into tokenizer_config.json: they say how it was loaded, not what it is. A tokenizer
# reloaded from the registry (a resumed build) would otherwise store different bytes.
LOADER_KEYS = ("is_local", "local_files_only", "_commit_hash", "_from_auto", "cache_dir", "force_download",
               "proxies", "revision", "subfolder", "token", "trust_remote_code", "name_or_path")


def tokenizer_files(tokenizer: "PreTrainedTokenizerBase") -> dict[str, bytes]:
    """The tokenizer as the files a checkpoint stores (``tokenizer.json``, ``tokenizer_config.json``, ...).

    The bytes do not depend on whether the tokenizer was trained here or loaded from files:
    :data:`LOADER_KEYS` are left out of ``tokenizer_config.json`` (written as ``save_pretrained``
    writes it: sorted keys, indent 2, a final newline), so a resumed build stores what an
    uninterrupted one does.
    """
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
    if "tokenizer_config.json" in files:
        files["tokenizer_config.json"] = _without_loader_keys(files["tokenizer_config.json"])
    return files


def _without_loader_keys(data: bytes) -> bytes:
    d = json.loads(data)
    if not isinstance(d, dict) or not any(k in d for k in LOADER_KEYS):
        return data
    for k in LOADER_KEYS:
        d.pop(k, None)
    return (json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> "PreTrainedTokenizerFast":
    """Train a byte-level BPE tokenizer (``tokenizers`` library) with pad/bos/eos tokens.

    Args:
        texts: training text, e.g. every item text of every domain.
        vocab_size: target vocabulary size (special tokens and the 256 bytes included).

    Returns:
        A ``PreTrainedTokenizerFast`` with ``pad_token``, ``bos_token`` and ``eos_token`` set.

    Raises:
        DataError: when there is no text to train on.
    """
    texts = [t for t in texts if t]
    if not texts:
        raise DataError("tokenizer: no item text to train the base tokenizer on; check the prepared dataset's items.")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )
