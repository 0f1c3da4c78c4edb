"""LoRA-to-LoRA merging (mmgrid.merge.lora): hand-computed cases, Eckart-Young, PEFT round trip."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mmgrid.cli import main
from mmgrid.merge.errors import MergeParamError, NonFiniteError
from mmgrid.merge.lora import (
    AdapterFormatError,
    AdapterMismatchError,
    UnsafeAdapterError,
    merge_lora,
)

P = "base_model.model."


def write_adapter(folder: Path, mods: dict, r: int, alpha: float, *, rslora: bool = False, targets=None,
                  base: str | None = "tiny", dtype=torch.float32, **extra) -> Path:
    """A PEFT-style adapter folder: mods = {module: (A (r, in), B (out, r))}."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for m, (a, b) in mods.items():
        tensors[f"{P}{m}.lora_A.weight"] = torch.as_tensor(a, dtype=dtype)
        tensors[f"{P}{m}.lora_B.weight"] = torch.as_tensor(b, dtype=dtype)
    save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "use_rslora": rslora,
           "target_modules": targets or sorted({m.rsplit(".", 1)[-1] for m in mods}),
           "base_model_name_or_path": base, "rank_pattern": {}, "alpha_pattern": {}, "fan_in_fan_out": False}
    cfg.update(extra)
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return folder


def random_adapter(folder: Path, seed: int, r: int, alpha: float, shapes: dict, **kw) -> tuple[Path, dict]:
    """Random A, B for every module; returns the folder and each module's scaled product."""
    g = torch.Generator().manual_seed(seed)
    mods, deltas = {}, {}
    for m, (out, inp) in shapes.items():
        a, b = torch.randn(r, inp, generator=g), torch.randn(out, r, generator=g)
        mods[m] = (a, b)
        s = alpha / math.sqrt(r) if kw.get("rslora") else alpha / r
        deltas[m] = s * b.double() @ a.double()
    return write_adapter(folder, mods, r, alpha, **kw), deltas


def product(folder: Path) -> dict:
    """B'A' * scaling of every module of a written adapter, read back from disk (float64)."""
    cfg = json.loads((folder / "adapter_config.json").read_text())
    st = load_file(str(folder / "adapter_model.safetensors"))
    out = {}
    for k in st:
        if k.endswith(".lora_A.weight"):
            m = k[len(P):-len(".lora_A.weight")]
            r = cfg["rank_pattern"].get(m, cfg["r"])
            alpha = cfg["alpha_pattern"].get(m, cfg["lora_alpha"])
            assert st[k].shape[0] == r
            out[m] = (alpha / r) * st[k.replace("lora_A", "lora_B")].double() @ st[k].double()
    return out


SHAPES = {"layers.0.q": (12, 8), "layers.0.v": (6, 8), "layers.1.q": (12, 8), "layers.1.v": (6, 8)}


# ------------------------------------------------------------------ hand-computed cases


def test_task_arithmetic_two_adapters_by_hand(tmp_path: Path) -> None:
    # adapter 1: r=1, alpha=2 -> scaling 2; B A = [[1, 0], [0, 0]] -> delta1 = [[2, 0], [0, 0]]
    # adapter 2: r=1, alpha=1 -> scaling 1; B A = [[0, 0], [0, 3]] -> delta2 = [[0, 0], [0, 3]]
    # weights (0.5, 1): delta = [[1, 0], [0, 3]]
    a = write_adapter(tmp_path / "a", {"m.q": ([[1.0, 0.0]], [[1.0], [0.0]])}, r=1, alpha=2)
    b = write_adapter(tmp_path / "b", {"m.q": ([[0.0, 1.0]], [[0.0], [3.0]])}, r=1, alpha=1)
    rep = merge_lora([a, b], tmp_path / "full", weights=[0.5, 1.0], rank=2)
    want = torch.tensor([[1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    assert torch.allclose(product(tmp_path / "full")["m.q"], want, atol=1e-6)
    assert rep.rank == 2 and rep.error < 1e-6
    cfg = json.loads((tmp_path / "full" / "adapter_config.json").read_text())
    assert cfg["r"] == 2 and cfg["lora_alpha"] == 2 and cfg["use_rslora"] is False
    # default rank = the largest input rank (1): keeps sigma = 3, drops sigma = 1 -> error 1/sqrt(10)
    rep1 = merge_lora([a, b], tmp_path / "r1", weights=[0.5, 1.0])
    assert rep1.rank == 1
    assert torch.allclose(product(tmp_path / "r1")["m.q"], torch.tensor([[0.0, 0.0], [0.0, 3.0]], dtype=torch.float64),
                          atol=1e-6)
    assert rep1.errors["base_model.model.m.q"] == pytest.approx(1 / math.sqrt(10), rel=1e-6)
    assert rep1.error == pytest.approx(1 / math.sqrt(10), rel=1e-6)
    # the report is written next to the adapter
    assert json.loads((tmp_path / "r1" / "mmgrid_merge_lora.json").read_text())["rank"] == 1


def test_ties_sign_rules_by_hand(tmp_path: Path) -> None:
    # 1x1 products: delta1 = +1, delta2 = -3; weights (0.9, 0.1), density 1 (no trim).
    # unweighted sign (paper): sign(1 - 3) = -1 -> only adapter 2 agrees -> -3
    # weighted sign (mergekit): sign(0.9 * 1 - 0.1 * 3) = +1 -> only adapter 1 agrees -> +1
    a = write_adapter(tmp_path / "a", {"m.q": ([[1.0]], [[1.0]])}, r=1, alpha=1)
    b = write_adapter(tmp_path / "b", {"m.q": ([[1.0]], [[-3.0]])}, r=1, alpha=1)
    merge_lora([a, b], tmp_path / "u", method="ties", weights=[0.9, 0.1], density=1.0)
    merge_lora([a, b], tmp_path / "w", method="ties", weights=[0.9, 0.1], density=1.0, sign_rule="weighted")
    assert float(product(tmp_path / "u")["m.q"]) == pytest.approx(-3.0, rel=1e-6)
    assert float(product(tmp_path / "w")["m.q"]) == pytest.approx(1.0, rel=1e-6)


def test_ties_trims_and_takes_the_disjoint_mean(tmp_path: Path) -> None:
    # rank-1 products on 2x2 with density 0.5 (keep 2 of 4 entries per product):
    # delta1 = [1,2]^T [1,1] = [[1,1],[2,2]]            -> trim keeps [[0,0],[2,2]]
    # delta2 = [-1,3]^T [1,-0.25]= [[-1,.25],[3,-.75]]   -> keeps |3|, |-1|: [[-1,0],[3,0]]
    # sign of the sum [[-1,0],[5,2]] -> [[-,+],[+,+]]; disjoint mean:
    # [0,0]: only delta2 agrees (-1) -> -1; [0,1]: nobody nonzero -> 0; [1,0]: (2+3)/2 = 2.5; [1,1]: 2
    a = write_adapter(tmp_path / "a", {"m.q": ([[1.0, 1.0]], [[1.0], [2.0]])}, r=1, alpha=1)
    b = write_adapter(tmp_path / "b", {"m.q": ([[1.0, -0.25]], [[-1.0], [3.0]])}, r=1, alpha=1)
    rep = merge_lora([a, b], tmp_path / "t", method="ties", density=0.5, rank="full")
    want = torch.tensor([[-1.0, 0.0], [2.5, 2.0]], dtype=torch.float64)
    assert torch.allclose(product(tmp_path / "t")["m.q"], want, atol=1e-6)
    assert rep.error < 1e-6


# ------------------------------------------------------------------ SVD re-factorisation


def test_full_rank_reproduces_the_combined_update(tmp_path: Path) -> None:
    a, da = random_adapter(tmp_path / "a", 1, r=4, alpha=8, shapes=SHAPES)
    b, db = random_adapter(tmp_path / "b", 2, r=2, alpha=4, shapes=SHAPES)
    c, dc = random_adapter(tmp_path / "c", 3, r=3, alpha=3, shapes=SHAPES)
    w = [0.6, -0.3, 1.2]
    rep = merge_lora([a, b, c], tmp_path / "m", weights=w, rank="full")
    got = product(tmp_path / "m")
    for m in SHAPES:
        want = w[0] * da[m] + w[1] * db[m] + w[2] * dc[m]
        assert float(torch.linalg.matrix_norm(got[m] - want) / torch.linalg.matrix_norm(want)) < 2e-6
        assert rep.ranks[P + m] == min(4 + 2 + 3, *SHAPES[m])  # rank <= sum of input ranks
    assert rep.error < 2e-6 and max(rep.errors.values()) < 2e-6


@pytest.mark.parametrize("method", ["task_arithmetic", "ties"])
def test_truncated_error_is_the_svd_tail_energy(tmp_path: Path, method: str) -> None:
    # Eckart-Young: ||delta - best rank-k||_F^2 = sum_{j>k} sigma_j^2
    a, _ = random_adapter(tmp_path / "a", 1, r=4, alpha=8, shapes=SHAPES)
    b, _ = random_adapter(tmp_path / "b", 2, r=4, alpha=4, shapes=SHAPES)
    kw = {"density": 0.7} if method == "ties" else {"weights": [0.5, 0.5]}
    full = merge_lora([a, b], tmp_path / "full", method=method, rank="full", **kw)
    assert full.error < 2e-6
    deltas = product(tmp_path / "full")  # the combined update (exact at full rank)
    rep = merge_lora([a, b], tmp_path / "r3", method=method, rank=3, **kw)
    tail2 = tot2 = 0.0
    for m, d in deltas.items():
        s2 = torch.linalg.svdvals(d).square()
        want = math.sqrt(float(s2[3:].sum() / s2.sum()))
        assert rep.errors[P + m] == pytest.approx(want, rel=1e-4)
        tail2, tot2 = tail2 + float(s2[3:].sum()), tot2 + float(s2.sum())
        assert rep.ranks[P + m] == 3
    assert rep.error == pytest.approx(math.sqrt(tail2 / tot2), rel=1e-4)
    assert 0.05 < rep.error < 1  # the test would not see a wrong tail if nothing were discarded


def test_energy_threshold_picks_the_smallest_sufficient_rank(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=4, alpha=8, shapes=SHAPES)
    b, _ = random_adapter(tmp_path / "b", 2, r=4, alpha=4, shapes=SHAPES)
    merge_lora([a, b], tmp_path / "full", rank="full")
    deltas = product(tmp_path / "full")
    rep = merge_lora([a, b], tmp_path / "e", energy=0.9)
    for m, d in deltas.items():
        s2 = torch.linalg.svdvals(d).square()
        frac = torch.cumsum(s2, 0) / s2.sum()
        k = int((frac < 0.9).sum()) + 1
        assert rep.ranks[P + m] == k
        assert rep.errors[P + m] <= math.sqrt(0.1) + 1e-6
    cfg = json.loads((tmp_path / "e" / "adapter_config.json").read_text())
    assert cfg["r"] == max(rep.ranks.values())
    for m, r in rep.ranks.items():  # the modules of another rank are in the patterns (scaling stays 1)
        if r != cfg["r"]:
            assert cfg["rank_pattern"][m[len(P):]] == r and cfg["alpha_pattern"][m[len(P):]] == r


def test_rslora_and_alpha_pattern_scaling(tmp_path: Path) -> None:
    shapes = {"layers.0.q": (6, 5), "layers.0.v": (6, 5)}
    g = torch.Generator().manual_seed(4)
    mods = {m: (torch.randn(4, 5, generator=g), torch.randn(6, 4, generator=g)) for m in shapes}
    a = write_adapter(tmp_path / "a", mods, r=4, alpha=8, rslora=True)
    merge_lora([a], tmp_path / "m", rank="full")
    got = product(tmp_path / "m")
    for m in shapes:  # rsLoRA: alpha / sqrt(r) = 8 / 2 = 4 (plain LoRA would give 8 / 4 = 2)
        assert torch.allclose(got[m], 4.0 * mods[m][1].double() @ mods[m][0].double(), rtol=1e-5, atol=1e-6)
    g = torch.Generator().manual_seed(5)
    mods = {m: (torch.randn(2, 5, generator=g), torch.randn(6, 2, generator=g)) for m in shapes}
    c = write_adapter(tmp_path / "c", mods, r=2, alpha=2, alpha_pattern={"v": 6})  # v: scaling 3, q: 1
    merge_lora([c], tmp_path / "mc", rank="full")
    got = product(tmp_path / "mc")
    for m, scale in (("layers.0.q", 1.0), ("layers.0.v", 3.0)):
        want = scale * mods[m][1].double() @ mods[m][0].double()
        assert torch.allclose(got[m], want, rtol=1e-5, atol=1e-6)


def test_output_keeps_the_inputs_dtype(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES, dtype=torch.bfloat16)
    b, _ = random_adapter(tmp_path / "b", 2, r=2, alpha=2, shapes=SHAPES, dtype=torch.bfloat16)
    merge_lora([a, b], tmp_path / "m")
    assert {t.dtype for t in load_file(str(tmp_path / "m" / "adapter_model.safetensors")).values()} == {torch.bfloat16}
    merge_lora([a, b], tmp_path / "f", dtype="float32")
    assert {t.dtype for t in load_file(str(tmp_path / "f" / "adapter_model.safetensors")).values()} == {torch.float32}


# ------------------------------------------------------------------ bad input


def test_mismatched_shapes_and_modules_are_named_errors(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES)
    wide, _ = random_adapter(tmp_path / "wide", 2, r=2, alpha=2, shapes={**SHAPES, "layers.1.v": (6, 9)})
    with pytest.raises(AdapterMismatchError, match=r"wide.*layers\.1\.v.*9 -> 6.*8 -> 6"):
        merge_lora([a, wide], tmp_path / "out")
    fewer, _ = random_adapter(tmp_path / "fewer", 3, r=2, alpha=2,
                              shapes={k: v for k, v in SHAPES.items() if k != "layers.1.q"}, targets=["q", "v"])
    with pytest.raises(AdapterMismatchError, match=r"fewer.*lacks module 'base_model\.model\.layers\.1\.q'"):
        merge_lora([a, fewer], tmp_path / "out")
    other, _ = random_adapter(tmp_path / "other", 4, r=2, alpha=2, shapes=SHAPES, targets=["q", "v", "o"])
    with pytest.raises(AdapterMismatchError, match=r"other.*target_modules"):
        merge_lora([a, other], tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_different_base_names_warn(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES, base="org/model-a")
    b, _ = random_adapter(tmp_path / "b", 2, r=2, alpha=2, shapes=SHAPES, base="org/model-b")
    with pytest.warns(UserWarning, match="different base models"):
        merge_lora([a, b], tmp_path / "m")


def test_pickle_only_adapter_is_refused(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES)
    binonly = tmp_path / "bin"
    binonly.mkdir()
    (binonly / "adapter_config.json").write_text((a / "adapter_config.json").read_text())
    (binonly / "adapter_model.bin").write_bytes(b"not to be unpickled")
    with pytest.raises(UnsafeAdapterError, match=r"adapter_model\.bin.*safetensors"):
        merge_lora([a, binonly], tmp_path / "out")
    with pytest.raises(AdapterFormatError, match="no adapter_config.json"):
        merge_lora([a, tmp_path], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unsupported_adapters_are_named_errors(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES)
    dora, _ = random_adapter(tmp_path / "dora", 2, r=2, alpha=2, shapes=SHAPES, use_dora=True)
    with pytest.raises(AdapterFormatError, match="use_dora"):
        merge_lora([a, dora], tmp_path / "out")
    lying, _ = random_adapter(tmp_path / "lying", 2, r=2, alpha=2, shapes=SHAPES, rank_pattern={"v": 8})
    with pytest.raises(AdapterFormatError, match=r"rank 2 but its config says r=8"):
        merge_lora([a, lying], tmp_path / "out")


def test_nonfinite_input_is_refused(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES)
    g = torch.Generator().manual_seed(2)
    mods = {m: (torch.randn(2, i, generator=g), torch.randn(o, 2, generator=g)) for m, (o, i) in SHAPES.items()}
    mods["layers.1.v"][1][3, 1] = float("nan")
    bad = write_adapter(tmp_path / "bad", mods, r=2, alpha=2)
    for method in ("task_arithmetic", "ties"):
        with pytest.raises(NonFiniteError, match=r"bad.*layers\.1\.v\.lora_B\.weight"):
            merge_lora([a, bad], tmp_path / "out", method=method)
    assert not (tmp_path / "out").exists()


def test_bad_parameters_are_named_errors(tmp_path: Path) -> None:
    a, _ = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES)
    for kw, pat in (({"weights": [1.0, 2.0]}, "one weight per adapter"), ({"method": "slerp"}, "unknown"),
                    ({"rank": 0}, "rank 0"), ({"energy": 1.5}, "energy"), ({"density": 0.2}, "TIES parameters"),
                    ({"method": "ties", "density": 0.0}, "density"), ({"rank": "big"}, "rank 'big'")):
        with pytest.raises(MergeParamError, match=pat):
            merge_lora([a], tmp_path / "out", **kw)
    merge_lora([a], tmp_path / "out")
    with pytest.raises(MergeParamError, match="already holds an adapter"):
        merge_lora([a], tmp_path / "out")
    merge_lora([a], tmp_path / "out", overwrite=True)


# ------------------------------------------------------------------ PEFT round trip


def _tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    return Qwen3ForCausalLM(cfg).eval()


def _peft_adapter(base, folder: Path, seed: int, **lora_kw) -> dict:
    """Train-free adapter (random A and B), saved; returns its merge_and_unload() state dict."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(init_lora_weights=False, **lora_kw))
    model.save_pretrained(str(folder))
    return {k: v.detach().clone() for k, v in model.merge_and_unload().state_dict().items()}


@pytest.fixture(scope="module")
def peft_pair(tmp_path_factory):
    pytest.importorskip("peft")
    root = tmp_path_factory.mktemp("peft")
    base = _tiny_qwen3()
    w1 = _peft_adapter(base, root / "a", 1, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    w2 = _peft_adapter(base, root / "b", 2, r=2, lora_alpha=4, use_rslora=True,
                       target_modules=["q_proj", "v_proj", "down_proj"])
    w0 = {k: v.detach().clone() for k, v in base.state_dict().items()}
    return base, root, w0, w1, w2


def _load_merged(base, folder: Path):
    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(base), str(folder)).eval()


def test_peft_round_trip_equals_the_dense_task_arithmetic_merge(peft_pair, tmp_path: Path) -> None:
    base, root, w0, w1, w2 = peft_pair
    w = [0.7, 0.5]
    rep = merge_lora([root / "a", root / "b"], tmp_path / "m", weights=w, rank="full")
    assert rep.error < 1e-5
    dense = {k: w0[k] + w[0] * (w1[k] - w0[k]) + w[1] * (w2[k] - w0[k]) for k in w0}
    model = _load_merged(base, tmp_path / "m")
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got_logits = model(input_ids=ids).logits
        ref = copy.deepcopy(base)
        ref.load_state_dict(dense)
        want_logits = ref(input_ids=ids).logits
    assert torch.allclose(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    merged = model.merge_and_unload().state_dict()
    changed = 0
    for k, v in dense.items():
        assert torch.allclose(merged[k], v, rtol=1e-5, atol=1e-6), k
        changed += int(not torch.equal(v, w0[k]))
    assert changed == 2 * 3  # q, v, down in both layers: the test compares real updates


def test_peft_round_trip_ties_equals_mmgrids_dense_ties(peft_pair, tmp_path: Path) -> None:
    from mmgrid.merge import merge

    base, root, w0, w1, w2 = peft_pair
    merge_lora([root / "a", root / "b"], tmp_path / "t", method="ties", density=0.3, rank="full")
    dense = merge("ties", [w1, w2], base=w0, density=0.3, scope="tensor")
    merged = _load_merged(base, tmp_path / "t").merge_and_unload().state_dict()
    for k, v in dense.items():
        assert torch.allclose(merged[k].float(), v.float(), rtol=1e-5, atol=1e-5), k


def test_peft_applies_the_truncated_factors_and_rank_pattern(peft_pair, tmp_path: Path) -> None:
    # energy gives modules different ranks (rank_pattern / alpha_pattern): PEFT must apply B'A' with scaling 1
    base, root, w0, _, _ = peft_pair
    rep = merge_lora([root / "a", root / "b"], tmp_path / "e", energy=0.8)
    assert len(set(rep.ranks.values())) > 1
    deltas = product(tmp_path / "e")
    merged = _load_merged(base, tmp_path / "e").merge_and_unload().state_dict()
    for m, d in deltas.items():
        k = m + ".weight"
        assert torch.allclose(merged[k].double(), w0[k].double() + d, rtol=1e-5, atol=1e-6), k


# ------------------------------------------------------------------ CLI


def test_cli_merge_lora(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, da = random_adapter(tmp_path / "a", 1, r=2, alpha=2, shapes=SHAPES)
    b, db = random_adapter(tmp_path / "b", 2, r=2, alpha=2, shapes=SHAPES)
    rc = main(["merge-lora", str(a), str(b), "--out", str(tmp_path / "m"), "--weights", "0.25", "0.75",
               "--rank", "full", "--per-module"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "relative reconstruction error" in out and "layers.1.v" in out
    got = product(tmp_path / "m")
    for m in SHAPES:
        assert torch.allclose(got[m], 0.25 * da[m] + 0.75 * db[m], rtol=1e-5, atol=1e-6)
    rc = main(["merge-lora", str(a), str(b), "--out", str(tmp_path / "t"), "--method", "ties", "--density", "0.5",
               "--rank", "2", "--json"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["method"] == "ties" and rep["rank"] == 2 and 0 < rep["error"] < 1
    # a named error is one line and exit status 2
    assert main(["merge-lora", str(a), str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2
    assert "nowhere" in capsys.readouterr().err
