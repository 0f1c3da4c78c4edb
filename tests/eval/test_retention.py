"""text_loss: the token-weighted mean NLL, whatever the batching (length-sorted, cached batches)."""

from __future__ import annotations

import pytest
import torch

from mmgrid.eval.retention import text_loss
from mmgrid.models import lm_batch, tiny_qwen3, train_tokenizer

TEXTS = ["a red shirt", "a blue kettle with a long spout and a lid", "red", "a blue shirt and a red kettle",
         "kettle", "a shirt"]


def _reference(model, tok, texts, max_length):
    """One text per forward pass: sum of its token NLLs (HF's mean loss x its predicted tokens)."""
    total, count = 0.0, 0
    for t in texts:
        b = lm_batch(tok, [t], max_length)
        n = int(b["attention_mask"].sum()) - 1  # tokens predicted: all but the first
        with torch.no_grad():
            total += model(**b).loss.item() * n
        count += n
    return total / count


def test_mean_over_tokens_of_texts_of_different_lengths_any_batch_size() -> None:
    tok = train_tokenizer(TEXTS * 10, vocab_size=280)
    torch.manual_seed(0)
    model = tiny_qwen3(len(tok)).eval()
    ref = _reference(model, tok, TEXTS, 12)  # 12 truncates the longest text
    for bs in (1, 2, 4, 32):
        assert text_loss(model, tok, TEXTS, 12, batch_size=bs) == pytest.approx(ref, rel=1e-5)
    # cached batches belong to their texts: other texts, another answer
    other = TEXTS[:3]
    assert text_loss(model, tok, other, 12) == pytest.approx(_reference(model, tok, other, 12), rel=1e-5)
    assert text_loss(model, tok, other, 12) != pytest.approx(ref, rel=1e-5)
    assert text_loss(model, tok, list(reversed(TEXTS)), 12) == pytest.approx(ref, rel=1e-5)
