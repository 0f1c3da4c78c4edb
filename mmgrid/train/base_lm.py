"""Training the tiny base: a byte-level BPE tokenizer on the grid's item text, then the
named architecture as a causal language model on the review text set apart for it
(``prepared.lm_text("train")``), through the same loop as the paradigms.

:mod:`mmgrid.models.base` builds architectures and loads stored bases;
:func:`ensure_base` is its ``load_base`` with this module as the trainer of a tiny base
that is not stored yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from mmgrid.config import BaseConfig
from mmgrid.models.base import BaseBundle, lm_batch, load_base
from mmgrid.models.tokenizer import train_tokenizer
from mmgrid.train.loop import train_stage

if TYPE_CHECKING:
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry


class LanguageModelTask:
    """Causal-LM training through the same loop as the paradigms (collate + loss)."""

    name = "base"

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        self.tokenizer, self.max_length = tokenizer, max_length

    def collate(self, model: torch.nn.Module, examples: list[str]) -> dict[str, torch.Tensor]:
        return lm_batch(self.tokenizer, examples, self.max_length)

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(**batch).loss


def train_tiny_base(builder: Callable[[int], Any], cfg: BaseConfig, prepared: PreparedDataset, seed: int,
                    progress: bool) -> BaseBundle:
    """Tokenizer on every domain's item text, then ``cfg.lm_epochs`` of LM training (seeded)."""
    texts = [t for d in prepared.domains for t in prepared.domain(d).item_texts]
    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    torch.manual_seed(seed)
    model = builder(len(tokenizer))
    lm_texts = list(prepared.lm_text("train"))
    bundle = BaseBundle(model, tokenizer, model.config)
    if lm_texts and cfg.lm_epochs > 0:
        log = train_stage(LanguageModelTask(tokenizer, cfg.max_length), model, lm_texts, epochs=cfg.lm_epochs,
                          lr=cfg.lm_lr, batch_size=cfg.lm_batch_size, seed=seed, where="base/*/lm",
                          progress=progress)
        bundle.lm_losses = log.epoch_losses
    model.to("cpu")  # the registry and the paradigms start from CPU tensors
    model.eval()
    return bundle


def ensure_base(cfg: BaseConfig, prepared: PreparedDataset, registry: Registry, seed: int = 0,
                progress: bool = False) -> tuple[BaseBundle, str]:
    """The grid's base from the registry, or built (a tiny base trained here) and stored.

    Returns:
        ``(bundle, base_id)`` as :func:`mmgrid.models.base.load_base`.
    """
    return load_base(cfg, prepared, registry, seed=seed, progress=progress, train_tiny=train_tiny_base)
