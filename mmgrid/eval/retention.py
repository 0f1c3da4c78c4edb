"""Text retention: a model's language-modelling loss on the held-out base text.

The Orbit paper's forgetting axis (section 3, Figure 2-3) is the loss of the original
LLM capability during recommendation fine-tuning. Here it is the mean next-token NLL
(and perplexity) on ``prepared.lm_text("heldout")``, compared with the base's own.
A paradigm exposes its causal LM through ``language_model(model) -> (lm, tokenizer)``;
a paradigm without one (SASRec) gets NaN.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from mmgrid.models.base import lm_batch


# tokenized held-out batches; the value keeps the tokenizer alive, so its id in the key is never reused
_BATCHES: dict[tuple[Any, ...], tuple[Any, list[dict[str, torch.Tensor]]]] = {}
_MAX_CACHED = 16


@torch.no_grad()
def text_loss(model: Any, tokenizer: Any, texts: Sequence[str], max_length: int = 64,
              batch_size: int = 32) -> float:
    """Mean next-token negative log-likelihood per token (nats) of ``texts``.

    The texts are tokenized once per tokenizer, text set and ``max_length`` (a grid
    evaluation scores the same held-out text with every model) and batched in order of
    length, so that a batch holds little padding. The mean over all tokens does not depend
    on which texts share a batch (up to float rounding of the sums).

    Args:
        model: a causal LM (``model(input_ids, attention_mask).logits``).
        tokenizer: its tokenizer.
        texts: the held-out text.
        max_length: tokens per text (``<bos> text <eos>``, truncated), as in base training.
        batch_size: texts per forward pass.
    """
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for batch in _length_batches(tokenizer, texts, max_length, batch_size):
        logits = model(input_ids=batch["input_ids"].to(device),
                       attention_mask=batch["attention_mask"].to(device)).logits
        labels = batch["labels"][:, 1:].to(device)
        mask = labels != -100
        # fused log-softmax + gather over the real tokens only (the same NLL as log_softmax().gather())
        total += float(torch.nn.functional.cross_entropy(logits[:, :-1][mask].float(), labels[mask], reduction="sum"))
        count += int(mask.sum())
    return total / count if count else float("nan")


def _length_batches(tokenizer: Any, texts: Sequence[str], max_length: int,
                    batch_size: int) -> list[dict[str, torch.Tensor]]:
    """:func:`mmgrid.models.base.lm_batch` batches of ``texts`` sorted by token length (cached)."""
    texts = list(texts)
    key = (id(tokenizer), len(tokenizer), tuple(texts), max_length, batch_size)
    if key in _BATCHES:
        return _BATCHES[key][1]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    batches = [lm_batch(tokenizer, [texts[i] for i in order[s:s + batch_size]], max_length)
               for s in range(0, len(order), batch_size)]
    if len(_BATCHES) >= _MAX_CACHED:
        _BATCHES.pop(next(iter(_BATCHES)))
    _BATCHES[key] = (tokenizer, batches)
    return batches


def language_model(paradigm: Any, model: Any) -> tuple[Any, Any] | None:
    """``(causal_lm, tokenizer)`` of a paradigm model, or None when it has no language model.

    A paradigm says so with ``language_model(model)``; otherwise the model itself (text,
    semid: the LM carries its tokenizer in an ``mmgrid_*`` info attribute) or its
    ``item_llm`` (emb) is used when it has an LM head.
    """
    fn = getattr(paradigm, "language_model", None)
    if fn is not None:
        return fn(model)
    for cand in (model, getattr(model, "item_llm", None)):
        if cand is None or not hasattr(cand, "get_output_embeddings") or cand.get_output_embeddings() is None:
            continue
        tok = _find_tokenizer(model)
        if tok is not None:
            return cand, tok
    return None


def _find_tokenizer(model: Any) -> Any:
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        return tok
    for name, value in vars(model).items():
        if name.startswith("mmgrid_") and getattr(value, "tokenizer", None) is not None:
            return value.tokenizer
    return None


def retention_metrics(paradigm: Any, model: Any, texts: Sequence[str], base_loss: float,
                      max_length: int = 64) -> dict[str, float]:
    """``text_loss``, ``text_ppl`` and ``text_loss_delta`` (vs the base); NaN without an LM."""
    lm = language_model(paradigm, model)
    loss = text_loss(lm[0], lm[1], texts, max_length) if lm is not None and texts else float("nan")
    return {
        "text_loss": loss,
        "text_ppl": math.exp(loss) if loss == loss and loss < 50 else float("nan"),
        "base_text_loss": base_loss,
        "text_loss_delta": loss - base_loss,
    }
