"""The causal-LM plumbing the text and semid paradigms share: token examples, padding, the
next-token loss, and a base-shaped ``Qwen3ForCausalLM`` stored with its HF state-dict names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from mmgrid.models.partial import hidden_states_at
from mmgrid.paradigms.base import Checkpoint
from mmgrid.paradigms.errors import CheckpointMismatchError
from mmgrid.paradigms.hf_files import hf_config_from_file
from mmgrid.paradigms.state import load_module_state, module_state

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class TokenExample:
    """A causal-LM training example: token ids whose last ``n_target`` tokens carry the loss."""

    ids: tuple[int, ...]
    n_target: int


def collate_lm(examples: Sequence[TokenExample], pad: int, max_len: int) -> dict[str, torch.Tensor]:
    """Left-padded batch (targets end every row at the same column); labels are -100 except on targets.

    Left padding lets :func:`lm_loss` compute logits for the last few columns only (the
    LM head over the whole vocabulary is most of a tiny model's cost). A prompt longer
    than ``max_len`` loses its oldest tokens (the target is always kept).
    """
    rows = [list(e.ids)[-max_len:] if len(e.ids) > max_len else list(e.ids) for e in examples]
    ids, mask, pos = left_pad(rows, pad)
    labels = torch.full(ids.shape, -100, dtype=torch.long)
    for i, e in enumerate(examples):
        t = min(e.n_target, len(rows[i]))
        if t:
            labels[i, -t:] = ids[i, -t:]
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "labels": labels}


def lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over the target tokens of a :func:`collate_lm` batch.

    Only the last ``max(n_target) + 1`` columns get logits; column ``j`` predicts token
    ``j + 1``, as in HF's own shifted loss. Where the decoder allows it
    (:func:`mmgrid.models.partial.supports_partial`) its last layer runs only at the columns
    whose logits are read (the ``keep - 1`` that predict a token of the row):
    :func:`mmgrid.models.partial.hidden_states_at`, the same numbers up to float rounding at
    about 60 % of the cost on the 2-layer tiny base; elsewhere the plain forward and a gather.
    """
    labels = batch["labels"]
    width = labels.shape[1]
    keep = min(int((labels != -100).sum(1).max()) + 1, width)
    target = labels[:, width - keep + 1:]
    inner = getattr(model, "model", None)
    if keep > 1 and inner is not None:
        cols = torch.arange(width - keep, width - 1, device=labels.device)[None].expand(labels.shape[0], -1)
        hidden = hidden_states_at(inner, cols, attention_mask=batch["attention_mask"], input_ids=batch["input_ids"],
                                  position_ids=batch["position_ids"])
        logits = model.lm_head(hidden)  # type: ignore[operator]  # a Module attribute is typed Tensor | Module
    else:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    position_ids=batch["position_ids"], logits_to_keep=keep)
        logits = out.logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                                             ignore_index=-100)


def left_pad(seqs: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ``(ids, attention_mask, position_ids)``; positions start at 0 on real tokens."""
    width = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s) :] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return ids, mask, pos


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def is_tied(lm: "PreTrainedModel") -> bool:
    return bool(getattr(lm.config, "tie_word_embeddings", False))


def lm_state(lm: "PreTrainedModel") -> dict[str, torch.Tensor]:
    """The LM's tensors with HF names (a tied ``lm_head.weight`` is left out, as HF saves it)."""
    return module_state(lm, "", skip=("lm_head.weight",) if is_tied(lm) else ())


def lm_from_checkpoint(ckpt: Checkpoint, where: str) -> "PreTrainedModel":
    """Rebuild the causal LM from ``config.json`` and the state (vocab rows taken from the state).

    A merged checkpoint may carry more embedding rows than its config says (the union of
    two models' added tokens), so the vocabulary size follows the state.
    """
    # lazy: transformers' model classes cost ~1.2 s to import; sasrec never needs them
    from transformers import AutoModelForCausalLM

    if "config.json" not in ckpt.files:
        raise CheckpointMismatchError(f"{where}: checkpoint has no config.json; it was not saved by an LLM paradigm.")
    config = hf_config_from_file(ckpt.files["config.json"])
    emb = ckpt.state.get("model.embed_tokens.weight")
    if emb is None:
        raise CheckpointMismatchError(f"{where}: checkpoint has no model.embed_tokens.weight; not a causal LM state.")
    config.vocab_size = int(emb.shape[0])
    lm = AutoModelForCausalLM.from_config(config)
    tied = is_tied(lm)
    load_module_state(lm, ckpt.state, where, allow_missing=("lm_head.weight",) if tied else ())
    if tied:
        lm.tie_weights()
    return lm.eval()


# --------------------------------------------------------------------------- the paradigm
