"""Evaluator groups and caching, records in the registry, the baseline table, retention."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import train_fakes as F  # noqa: E402

from mmgrid.errors import DataError  # noqa: E402
from mmgrid.eval.ranking import Evaluator, record_results  # noqa: E402
from mmgrid.eval.table import baseline_frame, format_table  # noqa: E402


class Oracle:
    """Ranks the true next item (last + 1) first for even users' histories only."""

    name = "oracle"

    def __init__(self) -> None:
        self.calls = 0

    def rank(self, model, domain, histories, k):
        self.calls += 1
        out = []
        for h in histories:
            nxt = (h[-1] + 1) % domain.n_items if h else 0
            row = [nxt] + [i for i in range(domain.n_items) if i != nxt]
            out.append(row[:k] if model == "good" else row[1:k + 1])
        return np.array(out)


def test_groups_split_users_by_activity_in_p2() -> None:
    dom = F.make_domain("A")
    ev = Evaluator(Oracle(), dom, ks=[1, 10], batch_size=7)
    assert ev.n == 30
    active = ev.masks["active"]
    assert active.sum() == 15 and (ev.users[active] % 2 == 0).all()  # odd users skip p2
    res = ev.evaluate_ranked(np.tile(np.arange(20), (30, 1)))
    assert res["all"]["n"] == 30 and res["active"]["n"] + res["non_active"]["n"] == 30


def test_evaluate_batches_and_metrics() -> None:
    dom, oracle = F.make_domain("A"), Oracle()
    ev = Evaluator(oracle, dom, ks=[1, 10], batch_size=7)
    good = ev.evaluate_ranked(ev.rank("good"))
    assert oracle.calls == 5  # ceil(30 / 7)
    assert good["all"]["recall@1"] == 1.0 and good["all"]["ndcg@10"] == 1.0
    bad = ev.evaluate_ranked(ev.rank("bad"))
    assert bad["all"]["recall@1"] == 0.0 and bad["all"]["recall@10"] == 0.0


def test_batches_are_ranked_by_history_length_and_answers_return_to_their_rows() -> None:
    class Recorder:
        name = "recorder"

        def __init__(self) -> None:
            self.widths: list[list[int]] = []

        def rank(self, model, domain, histories, k):
            self.widths.append([len(h) for h in histories])
            return np.array([[len(h) % domain.n_items, *range(1, k)] for h in histories])  # row = f(history)

    dom = F.make_domain("A")
    rec = Recorder()
    ev = Evaluator(rec, dom, ks=[3], batch_size=7)
    ev.histories = [list(range(n)) for n in (5, 0, 9, 2, 9, 1, 4, 7, 3, 8, 6, 2, 5, 1, 0) * 2]
    ev.by_length = np.argsort([len(h) for h in ev.histories], kind="stable")
    ranked = ev.rank(None)
    seen = [w for batch in rec.widths for w in batch]
    assert seen == sorted(seen)  # every batch holds histories of similar length, shortest first
    assert ranked[:, 0].tolist() == [len(h) % dom.n_items for h in ev.histories]  # each answer in its own row


def test_max_users_is_a_fixed_sample() -> None:
    dom = F.make_domain("A")
    a = Evaluator(Oracle(), dom, max_users=10, seed=0)
    b = Evaluator(Oracle(), dom, max_users=10, seed=0)
    assert a.n == 10 and a.users.tolist() == b.users.tolist()


def test_empty_split_and_unknown_group_are_data_errors() -> None:
    dom = F.make_domain("A", drop_phase="test")
    with pytest.raises(DataError, match="'test' has no examples"):
        Evaluator(Oracle(), dom)
    with pytest.raises(DataError, match="groups"):
        Evaluator(Oracle(), F.make_domain("A"), groups=["all", "lurkers"])


def test_record_results_writes_one_row_per_metric(tmp_path) -> None:
    from mmgrid.registry.api import Registry

    reg = Registry.open(tmp_path / "reg")
    cid = reg.put({"w": torch.zeros(2)}, {"paradigm": "toy", "domain": "A", "period": "p2"}, "trained")
    ev = Evaluator(Oracle(), F.make_domain("A"), ks=[10, 20])
    record_results(reg, cid, "test", ev.evaluate_ranked(ev.rank("good")), "A")
    res = reg.results(id=cid)
    assert set(res["group"]) == {"all", "active", "non_active"}
    assert set(res["metric"]) == {"recall@10", "ndcg@10", "recall@20", "ndcg@20", "n"}
    assert (res["eval_domain"] == "A").all()


def test_baseline_table_layout() -> None:
    rows = [("text", "A", "recall@10", 0.3), ("text", "A", "ndcg@10", 0.2), ("popular", "A", "recall@10", 0.1),
            ("text", "B", "recall@20", 0.5)]
    df = pd.DataFrame(rows, columns=["paradigm", "domain", "metric", "value"])
    frame = baseline_frame(df, ["text", "popular"], ["A", "B"])
    assert list(frame.columns)[:4] == [("A", "R@10"), ("A", "N@10"), ("A", "R@20"), ("A", "N@20")]
    assert frame.loc["text", ("B", "R@20")] == 0.5 and np.isnan(frame.loc["popular", ("B", "R@10")])
    md = format_table(frame)
    assert md.splitlines()[0].startswith("| Paradigm | A R@10 | A N@10")
    assert "| Most popular | 10.00 |" in md and "**30.00**" in md  # in %, the report's names


def test_text_loss_is_the_mean_token_nll() -> None:
    from mmgrid.eval.retention import retention_metrics, text_loss
    from mmgrid.models import lm_batch, tiny_qwen3, train_tokenizer

    tok = train_tokenizer(["a red shirt", "a blue kettle"] * 10, vocab_size=280)
    torch.manual_seed(0)
    model = tiny_qwen3(len(tok)).eval()
    texts = ["a red kettle", "a blue shirt"]  # same token count: the HF mean equals ours
    batch = lm_batch(tok, texts, 16)
    with torch.no_grad():
        ref = model(**batch).loss.item()
    assert text_loss(model, tok, texts, 16) == pytest.approx(ref, rel=1e-5)
    m = retention_metrics(F.ToyParadigm(), F.ToyModel(5), texts, base_loss=1.0)
    assert np.isnan(m["text_loss"]) and m["base_text_loss"] == 1.0  # no language model -> NaN
