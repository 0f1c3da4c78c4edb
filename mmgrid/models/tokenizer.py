"""Byte-level BPE tokenizer trained on the grid's item text (tiny bases only)."""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from mmgrid.errors import DataError

# Ids 0/1/2 are fixed so that tiny_qwen3's config (pad 0, bos 1, eos 2) matches.
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>"]


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
