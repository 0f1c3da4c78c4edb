"""Length-bucketed training batches: same examples per epoch, similar lengths per batch,
seeded, the last short batch kept last, and a new computation version in the stage identity."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import torch

from mmgrid.paradigms import get_paradigm
from mmgrid.runtime.plan import stage_params
from mmgrid.train.loop import length_buckets, train_stage


def test_buckets_keep_every_example_and_sort_within_windows() -> None:
    order = torch.randperm(70, generator=torch.Generator().manual_seed(0)).tolist()
    lengths = [(i * 37) % 23 for i in range(70)]  # arbitrary lengths with ties
    out = length_buckets(order, lengths, batch_size=8, window=4, gen=torch.Generator().manual_seed(1))
    assert Counter(out) == Counter(order)  # the epoch's examples, each once
    # windows of 4 batches = 32 examples: [0, 32), [32, 64), [64, 70); each window holds the same
    # examples as the shuffled order's window, and every batch is a run of that window's sorted lengths
    for w0, w1 in ((0, 32), (32, 64), (64, 70)):
        assert sorted(out[w0:w1]) == sorted(order[w0:w1])
        ranked = sorted(lengths[i] for i in order[w0:w1])
        batches = [sorted(lengths[i] for i in out[b:min(b + 8, w1)]) for b in range(w0, w1, 8)]
        batches.sort(key=lambda b: (b[0], b[-1]))  # contiguous runs of the sorted window
        assert [x for b in batches for x in b] == ranked
    assert len(out[64:]) == 6  # the short batch stays last (consecutive cuts of 8 stay batches)


def test_buckets_cut_padding_and_are_seeded() -> None:
    order = list(range(64))
    lengths = [1 + (i % 2) * 50 for i in range(64)]  # alternating short / long: random batches mix them
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    out = length_buckets(order, lengths, batch_size=8, window=8, gen=g(0))
    for b in range(0, 64, 8):
        assert len({lengths[i] for i in out[b:b + 8]}) == 1  # every batch is all short or all long
    assert out == length_buckets(order, lengths, batch_size=8, window=8, gen=g(0))
    assert out != length_buckets(order, lengths, batch_size=8, window=8, gen=g(5))  # batch order is seeded


class _LenTask:
    """A task recording its batches; lengths are the example values."""

    bucket_window = 2

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def example_length(self, e: int) -> int:
        return e

    def collate(self, model, examples):
        self.batches.append(list(examples))
        return {"x": torch.tensor(examples, dtype=torch.float32)}

    def loss(self, model, batch):
        return (model.w * batch["x"]).mean() ** 2


def test_train_stage_uses_buckets_when_the_task_asks() -> None:
    task = _LenTask()
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.ones(()))
    ex = [5, 1, 9, 3, 7, 2, 8, 4, 6, 0]
    log = train_stage(task, model, ex, epochs=2, lr=0.01, batch_size=2, seed=0, progress=False)
    assert log.steps == 10 and len(task.batches) == 10
    for e in range(2):
        epoch = task.batches[e * 5:(e + 1) * 5]
        assert sorted(x for b in epoch for x in b) == sorted(ex)
    task.bucket_window = 0  # off: the plain shuffled batches
    task.batches.clear()
    train_stage(task, model, ex, epochs=1, lr=0.01, batch_size=2, seed=0, progress=False)
    plain = [x for b in task.batches for x in b]
    assert plain == [ex[i] for i in torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist()]


def test_bucketed_paradigms_carry_train_version_in_their_stage_identity() -> None:
    cfg = SimpleNamespace(train=SimpleNamespace(epochs={"p1": 1}, lr=1e-3, weight_decay=0.0, batch_size=8,
                                                max_examples=None), paradigm_params={})
    variant = SimpleNamespace(regularizer="none", params={})
    # text 2 / semid 2: bucketed batches; semid 3: collaborative codes; text 3, semid 4, emb 2, sasrec 2: the
    # last layer only where it is read and the fused AdamW (emb and sasrec bucketed too)
    want = {"text": 3, "semid": 4, "emb": 2, "sasrec": 2}
    for name, version in want.items():
        par = get_paradigm(name)
        assert par.bucket_window > 1 and par.fused_optimizer
        assert stage_params(cfg, variant, name, "p1")["train_version"] == par.train_version == version
