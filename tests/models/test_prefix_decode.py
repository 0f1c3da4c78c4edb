"""SharedPrefixDecoder: beam decoding over a shared prompt cache gives the logits of a full HF forward."""

from __future__ import annotations

import pytest
import torch

from mmgrid.models.builders import tiny_qwen3
from mmgrid.models.prefix_decode import SharedPrefixDecoder


def _left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def _hf_last_logits(model, rows: list[list[int]]) -> torch.Tensor:
    """Reference: one full HF forward over each whole sequence (prompt + generated), no cache."""
    ids, mask, pos = _left_pad(rows)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits[:, -1]


@pytest.mark.parametrize("seed", [0, 3])
def test_logits_equal_a_full_forward_through_three_steps(seed: int) -> None:
    torch.manual_seed(seed)
    model = tiny_qwen3(80).eval()
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 80, (n,), generator=g).tolist() for n in (9, 4, 13)]  # padded differently
    ids, mask, pos = _left_pad(prompts)
    with torch.no_grad():
        dec = SharedPrefixDecoder(model, ids, mask, pos)
    torch.testing.assert_close(dec.logits, _hf_last_logits(model, prompts), rtol=1e-4, atol=1e-5)
    seqs = [list(p) for p in prompts]  # the sequence of each current beam
    n = len(prompts)
    for beams in (4, 6, 5):  # beams per query change from step to step, as in a trie search
        # each new beam picks a parent among the previous beams of its own query, out of order
        prev_b = len(seqs) // n
        origin = torch.tensor([q * prev_b + int(torch.randint(0, prev_b, (1,), generator=g))
                               for q in range(n) for _ in range(beams)])
        tokens = torch.randint(3, 80, (n * beams,), generator=g)
        seqs = [seqs[o] + [t] for o, t in zip(origin.tolist(), tokens.tolist())]
        got = dec.step(tokens, origin)
        torch.testing.assert_close(got, _hf_last_logits(model, seqs), rtol=1e-4, atol=1e-5)


def test_beams_not_a_multiple_of_queries_are_refused() -> None:
    from mmgrid.errors import ModelError

    torch.manual_seed(0)
    model = tiny_qwen3(40).eval()
    ids, mask, pos = _left_pad([[5, 6, 7], [8, 9]])
    with torch.no_grad():
        dec = SharedPrefixDecoder(model, ids, mask, pos)
    with pytest.raises(ModelError, match="not a multiple"):
        dec.step(torch.tensor([3, 4, 5]), torch.tensor([0, 0, 1]))


@pytest.mark.parametrize("bias", [False, True])
def test_log_softmax_at_equals_the_full_log_softmax_at_those_columns(bias: bool) -> None:
    from mmgrid.models.prefix_decode import log_softmax_at

    torch.manual_seed(7)
    head = torch.nn.Linear(16, 101, bias=bias)  # an odd vocabulary: padded to 128 inside
    hidden = torch.randn(37, 16)
    cols = torch.tensor([0, 5, 100, 64, 63])
    want = torch.log_softmax(head(hidden), dim=-1)[:, cols]
    with torch.no_grad():
        got = log_softmax_at(head, hidden, cols, chunk=10)  # 4 chunks, the last one short
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert log_softmax_at(head, hidden[:0], cols).shape == (0, 5)
