"""bench/peers.py and bench/gpu_check.sh: the equalities the peer comparison relies on, at tiny sizes.

The benchmark compares speed only after checking that mmgrid and its peer return the same thing; these
tests keep those peers honest in the suite: mmgrid's semid beam search against Hugging Face
``generate(num_beams, prefix_allowed_tokens_fn)`` over the same trie, emb / SASRec ranking against a
plain matmul + topk, a training stage against ``transformers.Trainer`` (same batches, optimizer,
schedule), and the GPU check's dry run on CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.workflow.conftest import REPO, load_bench

peers = load_bench("peers")


@pytest.fixture(scope="module")
def domain():
    return peers.make_domain(300, 48)


@pytest.fixture(scope="module")
def semid(domain, tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("emb-cache"))
    paradigm, model = peers.build_model("semid", domain, "demo", 2, cache)
    return paradigm, model.eval(), cache


@pytest.mark.slow
def test_semid_trie_beam_search_equals_generate_with_prefix_allowed_tokens(domain, semid) -> None:
    paradigm, model, _ = semid
    hist = peers.test_histories(domain, 8)
    mine = peers.semid_mmgrid(paradigm, model, hist, 10)
    theirs = peers.semid_generate(paradigm, model, hist, 10)
    assert theirs == mine
    trie = model.mmgrid_semid.trie
    assert all(len(row) == 10 and len(set(row)) == 10 for row in mine)  # full, distinct lists of real items
    assert all(0 <= i < domain.n_items for row in mine for i in row) and len(trie.item_of) == domain.n_items


@pytest.mark.slow
def test_generate_peer_ranks_by_the_model_so_a_changed_model_changes_its_lists(domain, semid) -> None:
    """The peer is not a copy of mmgrid's answer: it reads the model (other weights, other lists)."""
    import copy

    paradigm, model, _ = semid
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.model.layers[0].mlp.parameters():
            p.mul_(-3.0)
    hist = peers.test_histories(domain, 6)
    assert peers.semid_generate(paradigm, other, hist, 10) != peers.semid_generate(paradigm, model, hist, 10)


def test_emb_rank_equals_matmul_topk(domain) -> None:
    paradigm, model = peers.build_model("emb", domain, "demo", 2, None)
    model.eval()
    item_emb = paradigm.item_embeddings(model)
    hist = peers.test_histories(domain, 16)
    assert peers.emb_mmgrid(paradigm, model, domain, hist, 10, item_emb) == \
        peers.emb_matmul(paradigm, model, domain, hist, 10, item_emb)


def test_sasrec_rank_equals_matmul_topk_and_skips_the_history(domain) -> None:
    paradigm, model = peers.build_model("sasrec", domain, "demo", 2, None)
    model.eval()
    hist = peers.test_histories(domain, 16)
    mine = peers.sasrec_mmgrid(paradigm, model, domain, hist, 10)
    assert mine == peers.sasrec_matmul(paradigm, model, domain, hist, 10)
    assert all(not set(row) & set(h) for row, h in zip(mine, hist))


def test_mask_topk_by_hand() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.4, 0.3, 0.2, 0.1]])
    assert peers._mask_topk(scores.clone(), [[1], []], 2) == [[3, 2], [0, 1]]


@pytest.mark.slow
def test_training_stage_loss_curve_equals_the_trainers(domain, semid) -> None:
    paradigm, _, cache = semid
    losses = []
    for fn in (peers.train_mmgrid, peers.train_trainer):
        _, model = peers.build_model("train", domain, "demo", 2, cache)
        examples = paradigm.examples(model, domain, "pretrain")[:48]
        losses.append(fn(paradigm, model, examples, 8, 2, 1e-3))
    mine, trainer = losses
    assert len(mine) == len(trainer) == 12  # 48 examples / 8 per batch x 2 epochs
    assert mine == pytest.approx(trainer, rel=peers.LOSS_RTOL)
    assert mine[-1] < mine[0] - 0.1  # it trained: a curve, not a constant


def test_stage_batches_are_the_stages_examples_each_epoch(domain, semid) -> None:
    paradigm, model, _ = semid
    examples = paradigm.examples(model, domain, "pretrain")[:40]
    batches = peers.stage_batches(paradigm, model, examples, 8, 2, seed=0)
    assert [len(b) for b in batches] == [8] * 10
    for epoch in (batches[:5], batches[5:]):
        assert sorted(map(id, (e for b in epoch for e in b))) == sorted(map(id, examples))
    assert batches[:5] != batches[5:]  # reshuffled


def test_same_outputs_flags_a_difference() -> None:
    assert peers.same_outputs("semid", [[1, 2], [3, 4]], [[1, 2], [3, 4]])[0]
    assert not peers.same_outputs("semid", [[1, 2], [3, 4]], [[1, 2], [4, 3]])[0]
    assert peers.same_outputs("train", [2.0, 1.0], [2.0, 1.0 + 1e-5])[0]
    assert not peers.same_outputs("train", [2.0, 1.0], [2.0, 1.01])[0]
    assert not peers.same_outputs("train", [2.0], [2.0, 1.0])[0]


def test_matmul_params_of_a_qwen3_by_hand() -> None:
    """nanoGPT's N: every matrix product's weights, the input embedding left out, a tied head once."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    h, inter, heads, kvh, hd, vocab, layers = 16, 24, 2, 1, 8, 50, 2
    per_layer = h * heads * hd + 2 * h * kvh * hd + heads * hd * h + 3 * h * inter + 2 * h + 2 * hd  # + norms
    for tied in (False, True):
        cfg = Qwen3Config(vocab_size=vocab, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=kvh, head_dim=hd, tie_word_embeddings=tied)
        model = Qwen3ForCausalLM(cfg)
        assert peers.matmul_params(model) == layers * per_layer + h + vocab * h  # layers, final norm, head


def test_peak_flops_table_and_override() -> None:
    assert peers.peak_flops("NVIDIA H200", None) == pytest.approx(989.4e12)
    assert peers.peak_flops("NVIDIA H100 PCIe", None) == pytest.approx(756e12)
    assert peers.peak_flops("NVIDIA A100-SXM4-80GB", None) == pytest.approx(312e12)
    assert peers.peak_flops("Some GPU", None) is None
    assert peers.peak_flops("Some GPU", 100.0) == pytest.approx(100e12)


def _gpu_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, "MMGRID_BENCH_NO_RECORD": "1", "PYTHONPATH": str(REPO), **env}
    return subprocess.run(["bash", str(REPO / "bench" / "gpu_check.sh"), *args], env=full, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_gpu_check_dry_run_runs_the_same_code_on_cpu() -> None:
    out = _gpu_check("--dry-run", PEAK_TFLOPS="0.001")
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "DRY RUN on CPU" in text and "rehearsal" in text
    for what in ("training stage", "ranking pass"):
        line = next(ln for ln in text.splitlines() if ln.startswith(what))
        assert "tokens/s" in line and "MFU" in line and "n/a" not in line  # the MFU path ran (nominal peak)


def test_gpu_check_refuses_without_cuda_and_bad_arguments() -> None:
    bad = _gpu_check("--fast")
    assert bad.returncode == 2 and "unknown argument '--fast'" in bad.stderr
    assert "--dry-run" in _gpu_check("--help").stdout
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    out = _gpu_check()
    assert out.returncode == 2 and "no CUDA device" in out.stderr and "--dry-run" in out.stderr
