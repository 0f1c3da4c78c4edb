"""SASRec (Kang & McAuley 2018): the ID-based sequential recommender MMGRid reports as reference.

Item embeddings (a padding row 0, item ``i`` at row ``i + 1``) plus learned positional
embeddings feed ``layers`` causal self-attention blocks (pre-LayerNorm, as in the
authors' code: Q from the normed input, residual, point-wise two-layer FFN with ReLU;
paper Eq. 1-5). The next item's score is the dot product of the last position's output
with the item embedding (shared input/output embeddings, paper section III-D).

Loss: full softmax cross-entropy over all items of the domain at the last position of
each example, instead of the paper's binary cross-entropy with one sampled negative per
position: catalogs here are small, so the exact softmax is cheap and converges faster.
Only the last position is trained because every prepared example already is one
interaction of the phase (its history belongs to earlier ones).

The model ignores the base LLM: ``build`` makes it from the domain and a seed alone.
Ranking scores every item; with ``exclude_history`` (default true) history items are
masked out (prepared data has one interaction per user and item).

Checkpoint names are the module's own ``state_dict`` names (in-place sweeps rely on it):
``item_emb.weight``, ``pos_emb.weight``, ``blocks.<i>.{ln1,qkv,out,ln2,fc1,fc2}.*``,
``final_ln.*``.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mmgrid.errors import ModelError
from mmgrid.paradigms.base import Checkpoint
from mmgrid.paradigms.examples import Example, last_index, load_examples, pad_right
from mmgrid.paradigms.params import EVAL, MAX_BATCH, MAX_DEPTH, MAX_HISTORY, MAX_WIDTH, Knobs, knob, paradigm_knobs
from mmgrid.paradigms.ranking import eval_mode, rank_by_length
from mmgrid.paradigms.registration import register_paradigm
from mmgrid.paradigms.state import check_n_items, load_module_state, module_state

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import DomainData
    from mmgrid.models.base import BaseBundle

@paradigm_knobs("sasrec")
class SASRecKnobs(Knobs):
    """SASRec's knobs (``paradigm_params.sasrec``)."""

    cross_checks = [(lambda p: p["hidden"] % p["heads"] == 0,
                     "hidden={hidden} is not divisible by heads={heads}; choose heads dividing hidden (e.g. heads=1)")]

    hidden: int = knob(64, 1, MAX_WIDTH, 'int', "embedding and block width")
    layers: int = knob(2, 0, MAX_DEPTH, 'int', "self-attention blocks (paper: 2)")
    heads: int = knob(1, 1, MAX_DEPTH, 'int', "attention heads (paper: 1); must divide hidden")
    dropout: float = knob(0.2, 0, 1, 'float<', "paper: 0.2 on sparse data, 0.5 on MovieLens")
    max_len: int = knob(20, 1, MAX_HISTORY, 'int', "most recent history items read (also positional embeddings)")
    exclude_history: bool = knob(True, None, None, 'bool', "never recommend an item already in the history", use=EVAL)
    item_bias: bool = knob(False, None, None, 'bool', "add a learned per-item score offset (not in the paper)")
    user_batch: int = knob(2048, 1, MAX_BATCH, 'int', "histories scored per forward when ranking", use=EVAL)


DEFAULTS: dict[str, Any] = SASRecKnobs.defaults()  # the knobs' defaults (the declaration above)
_SIZE_KEYS = ("hidden", "layers", "heads", "max_len", "item_bias")


class Block(nn.Module):
    """One pre-LayerNorm causal self-attention block with a point-wise FFN (SASRec Eq. 3-5)."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        if hidden % heads:
            raise ModelError(f"sasrec: hidden={hidden} is not divisible by heads={heads}.")
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, last: torch.Tensor | None = None,
                rng: np.random.Generator | None = None) -> torch.Tensor:
        """``x [B, L, H]`` -> ``[B, L, H]``; with ``last [B]`` only each row's position ``last`` ``[B, H]``
        (its query, attention, FFN and dropout there; keys and values still at every position).
        ``rng``: where the dropout masks come from while training (:func:`dropout`)."""
        b, n, h = x.shape
        hd = h // self.heads
        xn = self.ln1(x)
        if last is None:
            q, k, v = self.qkv(xn).view(b, n, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
            rows = n
        else:
            # the one qkv projection split by its output rows: keys and values at every position,
            # the query at the last one only (the same weights; Q from the normed input)
            rows = 1
            k, v = F.linear(xn, self.qkv.weight[h:], self.qkv.bias[h:]).view(b, n, 2, self.heads, hd).permute(
                2, 0, 3, 1, 4)
            pick = torch.arange(b, device=x.device)
            x = x[pick, last][:, None]
            q = F.linear(xn[pick, last][:, None], self.qkv.weight[:h], self.qkv.bias[:h]).view(
                b, 1, self.heads, hd).transpose(1, 2)
            mask = mask[pick, :, last][:, :, None]  # [B, 1, 1, L]
        p = self.drop.p if self.training else 0.0
        if p > 0.0:  # attention dropout (what scaled_dot_product_attention's math path does), masks from rng
            w = (q @ k.transpose(-1, -2) * hd ** -0.5).masked_fill(~mask, float("-inf")).softmax(-1)
            att = dropout(w, p, rng) @ v
        else:
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + dropout(self.out(att.transpose(1, 2).reshape(b, rows, h)), p, rng)
        x = x + dropout(self.fc2(dropout(F.relu(self.fc1(self.ln2(x))), p, rng)), p, rng)
        return x if last is None else x[:, 0]


def dropout(x: torch.Tensor, p: float, rng: np.random.Generator | None) -> torch.Tensor:
    """Inverted dropout with probability ``p`` (0: ``x`` itself).

    On CPU with ``rng`` the keep mask is drawn by numpy's SFC64 generator (seeded from torch's
    generator once per forward, so a seeded stage is reproducible): torch's CPU ``bernoulli_``
    draws one Mersenne-Twister number per element, ~4x slower, and was the largest single cost
    of a SASRec training step (11-20 %). Elsewhere ``F.dropout``.
    """
    if p <= 0.0:
        return x
    if rng is None or x.device.type != "cpu":
        return F.dropout(x, p, True)
    keep = (rng.random(tuple(x.shape), dtype=np.float32) >= p).astype(np.float32) * np.float32(1.0 / (1.0 - p))
    return x * torch.from_numpy(keep).to(x.dtype)


class SASRecModel(nn.Module):
    """SASRec of one domain: ``n_items`` items (+ padding row 0)."""

    def __init__(self, n_items: int, domain: str, params: SASRecKnobs) -> None:
        super().__init__()
        hidden = int(params.hidden)
        self.n_items, self.domain, self.params = n_items, domain, params
        self.item_emb = nn.Embedding(n_items + 1, hidden, padding_idx=0)
        self.pos_emb = nn.Embedding(int(params.max_len), hidden)
        self.emb_drop = nn.Dropout(float(params.dropout))
        self.blocks = nn.ModuleList(
            Block(hidden, int(params.heads), float(params.dropout)) for _ in range(int(params.layers))
        )
        self.final_ln = nn.LayerNorm(hidden)
        self.item_bias = nn.Parameter(torch.zeros(n_items)) if params.item_bias else None

    def users(self, items: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Last-position outputs ``[B, H]`` for right-padded item_idx ``[B, L]`` (pads anywhere >= length)."""
        n = items.shape[1]
        pos = torch.arange(n, device=items.device)
        real = pos[None, :] < lengths[:, None]
        ids = torch.where(real, items + 1, torch.zeros_like(items))
        x = self.item_emb(ids) * math.sqrt(self.item_emb.embedding_dim) + self.pos_emb(pos)[None]
        rng = None
        if self.training and float(self.emb_drop.p) > 0.0 and items.device.type == "cpu":
            rng = np.random.Generator(np.random.SFC64(int(torch.randint(0, 2**62, (1,)))))  # seeded by torch
        x = dropout(x, float(self.emb_drop.p) if self.training else 0.0, rng) * real[..., None]
        keys = real.clone()
        keys[:, 0] = True  # an empty history attends to its lone (zero) position instead of nothing
        mask = (pos[None, :, None] >= pos[None, None, :]) & keys[:, None, :]  # causal AND real key
        mask = mask[:, None]  # broadcast over heads
        for block in self.blocks[:-1]:
            x = block(x, mask, rng=rng)
        # only the last position is read: the last block computes its output there alone
        return self.final_ln(self.blocks[-1](x, mask, last_index(lengths), rng=rng))

    def scores(self, user: torch.Tensor) -> torch.Tensor:
        """Dot product with every item embedding: ``[B, n_items]``."""
        scores = user @ self.item_emb.weight[1:].T
        return scores + self.item_bias if self.item_bias is not None else scores


@register_paradigm("sasrec")
class SASRecParadigm:
    """SASRec behind the Paradigm protocol (ID-based; ignores the base LLM)."""

    name = "sasrec"
    defaults = DEFAULTS  # paradigm_params.<name>: every knob with its default (checked by mmgrid.validate)
    # 2: the last block only at the last position; dropout masks from numpy (dropout(); with the
    # last block's masks drawn for that position alone, the random stream differs); length-bucketed batches
    # (as text and semid: mmgrid.train.loop.length_buckets; a random batch is padded to its longest history,
    # ~60 % padding on the demo); the fused AdamW. New ids.
    train_version = 2
    fused_optimizer = True
    bucket_window = 8

    def example_length(self, example: Example) -> int:
        return len(example.history)

    def build(self, base: "BaseBundle", domain: "DomainData", params: dict[str, Any], seed: int) -> SASRecModel:
        p = SASRecKnobs.resolve(params)
        with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
            torch.manual_seed(seed)
            model = SASRecModel(domain.n_items, domain.name, p)
            for name, w in model.named_parameters():
                if w.dim() > 1:
                    nn.init.xavier_normal_(w)  # the authors' initialisation
            with torch.no_grad():
                model.item_emb.weight[0].zero_()
        return model

    def examples(self, model: SASRecModel, domain: "DomainData", phase: str) -> list[Example]:
        return load_examples(domain, phase, int(model.params.max_len))

    def collate(self, model: SASRecModel, examples: list[Example]) -> dict[str, torch.Tensor]:
        """``history [B, L]`` (right-padded item_idx), ``lengths [B]``, ``target [B]``."""
        hist, lengths = pad_right([e.history for e in examples], pad=0, max_len=int(model.params.max_len))
        return {"history": hist, "lengths": lengths, "target": torch.tensor([e.target for e in examples])}

    def loss(self, model: SASRecModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model.scores(model.users(batch["history"], batch["lengths"]))
        return F.cross_entropy(logits.float(), batch["target"])

    @torch.no_grad()
    def rank(self, model: SASRecModel, domain: "DomainData", histories: list[list[int]], k: int) -> np.ndarray:
        check_n_items({"n_items": model.n_items, "domain": model.domain}, domain, "sasrec")
        keep, step = int(model.params.max_len), int(model.params.user_batch)
        device = model.item_emb.weight.device
        out = []
        with eval_mode(model):
            for s in range(0, len(histories), step):
                chunk = [list(h)[-keep:] for h in histories[s : s + step]]
                # histories of similar length together: the padded positions are not computed
                out.append(rank_by_length(chunk, k, lambda ids, lengths: model.scores(model.users(ids, lengths)),
                                          bool(model.params.exclude_history), device))
        return np.concatenate(out) if out else np.zeros((0, k), dtype=np.int64)

    def save(self, model: SASRecModel) -> Checkpoint:
        sizes = {key: getattr(model.params, key) for key in _SIZE_KEYS}
        meta = {"paradigm": "sasrec", "domain": model.domain, "n_items": model.n_items, **sizes,
                "params": model.params.to_dict()}
        files = {"config.json": json.dumps({"model_type": "sasrec", "n_items": model.n_items, **sizes}).encode()}
        return Checkpoint(state=module_state(model, ""), files=files, meta=meta)

    def load(self, ckpt: Checkpoint, domain: "DomainData", params: dict[str, Any]) -> SASRecModel:
        check_n_items(ckpt.meta, domain, "sasrec")
        # Sizes come from the checkpoint; other knobs (dropout, exclude_history) may be overridden.
        p = SASRecKnobs.resolve({**ckpt.meta.get("params", {}), **(params or {})})
        p = replace(p, **{key: ckpt.meta[key] for key in _SIZE_KEYS if key in ckpt.meta})
        model = SASRecModel(domain.n_items, domain.name, p)
        load_module_state(model, dict(ckpt.state), "sasrec")
        return model.eval()
