"""extract_lora / apply_lora: hand-computed ranks and errors, PEFT applying the extracted
adapter, mergekit-extract-lora as oracle, and the registry round trip."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.lora import apply_lora, extract_lora, merge_lora


def _pair(seed=0, shapes=None, rank=None):
    g = torch.Generator().manual_seed(seed)
    shapes = shapes or {"model.layers.0.mlp.up_proj.weight": (6, 4), "model.layers.0.self_attn.q_proj.weight": (4, 4),
                        "model.embed_tokens.weight": (10, 4), "model.norm.weight": (4,)}
    base = {k: torch.randn(s, generator=g) for k, s in shapes.items()}
    ck = {k: v + 0.1 * torch.randn(v.shape, generator=g) for k, v in base.items()}
    return base, ck


def test_diagonal_task_vector_by_hand(tmp_path: Path) -> None:
    """tau = diag(3, 2, 1) (0 elsewhere): rank 2 keeps 3 and 2, error 1 / sqrt(14); energy 0.9
    (sigma^2 shares 9/14 = 0.64, 13/14 = 0.93) also picks 2; energy 0.5 picks 1: error sqrt(5/14)."""
    base = {"m.lin.weight": torch.zeros(3, 3)}
    ck = {"m.lin.weight": torch.diag(torch.tensor([3.0, 2.0, 1.0]))}
    rep = extract_lora(ck, base, tmp_path / "a", rank=2)
    assert rep.ranks == {"m.lin": 2} and rep.errors["m.lin"] == pytest.approx(1 / math.sqrt(14), rel=1e-6)
    assert extract_lora(ck, base, tmp_path / "b", energy=0.9).ranks == {"m.lin": 2}
    rep = extract_lora(ck, base, tmp_path / "c", energy=0.5)
    assert rep.ranks == {"m.lin": 1} and rep.error == pytest.approx(math.sqrt(5 / 14), rel=1e-6)
    applied = apply_lora(tmp_path / "a", base)["m.lin.weight"]
    assert torch.allclose(applied, torch.diag(torch.tensor([3.0, 2.0, 0.0])), atol=1e-6)
    cfg = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert cfg["r"] == cfg["lora_alpha"] == 2 and cfg["target_modules"] == ["m.lin"]


def test_full_rank_is_exact_and_the_rest_is_reported(tmp_path: Path) -> None:
    base, ck = _pair()
    rep = extract_lora(ck, base, tmp_path / "a", rank=10)
    assert rep.error < 1e-6 and set(rep.ranks) == {"model.layers.0.mlp.up_proj", "model.layers.0.self_attn.q_proj"}
    out = apply_lora(tmp_path / "a", base)
    for k in rep.ranks:
        assert torch.allclose(out[k + ".weight"], ck[k + ".weight"], atol=1e-5)
    for k in ("model.embed_tokens.weight", "model.norm.weight"):  # not carried: stays at the base
        assert torch.equal(out[k], base[k])
    tau2 = {k: float((ck[k] - base[k]).square().sum()) for k in base}
    total = sum(tau2.values())
    assert rep.not_carried == pytest.approx({k: tau2[k] / total for k in ("model.embed_tokens.weight", "model.norm.weight")})
    assert rep.carried + sum(rep.not_carried.values()) == pytest.approx(1.0)


def test_error_is_the_svd_tail_and_shrinks_with_rank(tmp_path: Path) -> None:
    base, ck = _pair(1)
    name = "model.layers.0.mlp.up_proj"
    s = torch.linalg.svdvals((ck[name + ".weight"] - base[name + ".weight"]).double())
    last = 2.0
    for r in (1, 2, 3, 4):
        rep = extract_lora(ck, base, tmp_path / f"r{r}", rank=r, include=["mlp"])
        want = float(s[r:].square().sum().sqrt() / s.square().sum().sqrt())
        assert rep.errors[name] == pytest.approx(want, rel=1e-5, abs=1e-7) and rep.errors[name] <= last
        last = rep.errors[name]
        assert list(rep.ranks) == [name]  # include= filters


def test_bad_input_is_named_and_nothing_written(tmp_path: Path) -> None:
    base, ck = _pair()
    with pytest.raises(MergeParamError, match="give rank"):
        extract_lora(ck, base, tmp_path / "x")
    with pytest.raises(MergeParamError, match="energy"):
        extract_lora(ck, base, tmp_path / "x", energy=1.5)
    with pytest.raises(MergeParamError, match="no target module"):
        extract_lora(ck, base, tmp_path / "x", rank=2, include=["nothing_like_this"])
    with pytest.raises(MergeParamError, match="equals the base"):
        extract_lora(base, base, tmp_path / "x", rank=2)
    with pytest.raises(MergeParamError, match="not a regular expression"):
        extract_lora(ck, base, tmp_path / "x", rank=2, exclude=["("])
    assert not (tmp_path / "x").exists()
    extract_lora(ck, base, tmp_path / "y", rank=2)
    with pytest.raises(MergeParamError, match="already holds an adapter"):
        extract_lora(ck, base, tmp_path / "y", rank=2)


def _tiny_qwen3(seed=0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    return Qwen3ForCausalLM(cfg).eval()


def test_peft_applies_the_extracted_adapter_as_apply_lora(tmp_path: Path) -> None:
    """PEFT reads the adapter (rank_pattern included) and its merged model equals apply_lora's."""
    peft = pytest.importorskip("peft")
    base = _tiny_qwen3()
    w0 = {k: v.detach().clone() for k, v in base.state_dict().items()}
    g = torch.Generator().manual_seed(3)
    w1 = {k: (v + 0.02 * torch.randn(v.shape, generator=g)) if v.is_floating_point() else v for k, v in w0.items()}
    for k, v in w1.items():  # a strong rank-1 update on q_proj: energy 0.8 keeps 1 there, 6 elsewhere
        if "q_proj" in k:
            v += torch.outer(torch.randn(v.shape[0], generator=g), torch.randn(v.shape[1], generator=g))
    rep = extract_lora(w1, w0, tmp_path / "ad", rank=6, energy=0.8)
    assert len(set(rep.ranks.values())) > 1  # energy made ranks differ: rank_pattern is exercised
    model = peft.PeftModel.from_pretrained(copy.deepcopy(base), str(tmp_path / "ad")).merge_and_unload()
    ours = apply_lora(tmp_path / "ad", w0)
    for k, v in model.state_dict().items():
        assert torch.allclose(v, ours[k], rtol=1e-5, atol=1e-6), k
    merged = merge_lora([tmp_path / "ad", tmp_path / "ad"], tmp_path / "m", weights=[0.5, 0.5], rank="full")
    assert merged.error < 1e-5  # two halves of one adapter: the adapter
    back = apply_lora(tmp_path / "m", w0)
    assert all(torch.allclose(back[k], ours[k], rtol=1e-5, atol=1e-6) for k in ours)


def test_mergekit_extract_lora_is_the_oracle(tmp_path: Path) -> None:
    """mergekit-extract-lora (its own venv) on the oracle's tiny Qwen3 folders, rank 5, embeddings,
    LM head and norms left out: per module its B A equals ours (both the best rank-5 approximation
    of tau) within 1e-4 relative: mergekit takes the SVD in float32, which fixes the rank-5 subspace
    only to about 6e-8 sigma_1 / (sigma_5 - sigma_6) (measured: 1.2e-5)."""
    import subprocess

    from hf_data import qwen3_state, write_folder
    from mmgrid.merge.mergekit import find_mergekit_python

    mk = find_mergekit_python()
    if mk is None:
        pytest.skip("mergekit not installed (see tests/merge/test_mergekit_oracle.py for its venv)")
    cli = Path(mk).with_name("mergekit-extract-lora")
    base = qwen3_state(0)
    ck = qwen3_state(1, base)
    write_folder(tmp_path / "base", base)
    write_folder(tmp_path / "ft", ck)
    proc = subprocess.run([str(cli), "--model", str(tmp_path / "ft"), "--base-model", str(tmp_path / "base"),
                           "--out-path", str(tmp_path / "theirs"), "--max-rank", "5", "-e", "embed|lm_head|norm",
                           "--skip-undecomposable", "--quiet"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = extract_lora(ck, base, tmp_path / "ours", rank=5)
    from safetensors.torch import load_file

    theirs = load_file(str(tmp_path / "theirs" / "adapter_model.safetensors"))
    ours = load_file(str(tmp_path / "ours" / "adapter_model.safetensors"))
    mods = {k[: -len(".lora_A.weight")] for k in theirs if k.endswith(".lora_A.weight")}
    assert mods == {k[: -len(".lora_A.weight")] for k in ours if k.endswith(".lora_A.weight")} and len(mods) == 21
    worst = 0.0
    for m in mods:
        t = theirs[m + ".lora_B.weight"].double() @ theirs[m + ".lora_A.weight"].double()
        o = ours[m + ".lora_B.weight"].double() @ ours[m + ".lora_A.weight"].double()
        worst = max(worst, float((o - t).norm() / t.norm()))
    assert worst <= 1e-4, worst
    assert 0.0 < rep.error < 1.0  # rank 5 of 8-16: a real truncation
    print(f"mergekit-extract-lora: {len(mods)} modules, max relative difference of B A {worst:.2e}")
