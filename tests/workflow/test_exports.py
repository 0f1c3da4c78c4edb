"""Exports that load as what they say: every paradigm's export is opened by its documented
loader and gives the outputs of mmgrid's own model, or is refused by name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from mmgrid.query import Grid, load_model
from mmgrid.registry.hf import ExportUnsupportedError
from tests.workflow.conftest import mmgrid

pytestmark = pytest.mark.slow


def _one(g: Grid, paradigm: str) -> str:
    df = g.registry.query(paradigm=paradigm, domain="Books", period="p2", kind="trained", variant="default", seed=0)
    return df["id"].iloc[0]


@pytest.mark.parametrize("paradigm", ["text", "semid"])
def test_causal_lm_export_loads_into_the_trained_model(quick_demo: Path, tmp_path: Path, paradigm: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mmgrid.paradigms.lm import lm_from_checkpoint
    from mmgrid.runtime.checkpoints import load_checkpoint

    g = Grid.open(quick_demo)
    cid = _one(g, paradigm)
    old = os.umask(0o022)
    try:
        out = tmp_path / "export"
        proc = mmgrid("registry", "export-hf", cid, str(out), "--registry", str(quick_demo))
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    assert "AutoModelForCausalLM" in proc.stdout
    for f in out.iterdir():  # the user's umask (022), not a library's 0600
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f
    hf, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert set(info["missing_keys"]) <= {"lm_head.weight"} and not info["unexpected_keys"]
    tok = AutoTokenizer.from_pretrained(out)
    ours = lm_from_checkpoint(load_checkpoint(g.registry, cid), "test")
    ids = tok("Books I read last summer", return_tensors="pt")["input_ids"]
    ids = torch.cat([ids, torch.tensor([[hf.config.vocab_size - 1]])], dim=1)  # an added item token too
    with torch.no_grad():
        want, got = ours(ids).logits, hf.eval()(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("paradigm", ["emb", "sasrec"])
def test_emb_and_sasrec_are_refused_by_name_and_load_through_mmgrid(quick_demo: Path, tmp_path: Path,
                                                                   paradigm: str) -> None:
    g = Grid.open(quick_demo)
    cid = _one(g, paradigm)
    with pytest.raises(ExportUnsupportedError, match="load_model"):
        g.registry.export_hf(cid, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    proc = mmgrid("registry", "export-hf", cid, str(tmp_path / "y"), "--registry", str(quick_demo))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    model = load_model(g.registry, cid)  # the loader the error names: the trained model, weights and all
    from mmgrid.runtime.checkpoints import load_checkpoint

    state = load_checkpoint(g.registry, cid).state
    mine = {k: v for k, v in model.state_dict().items()}
    shared = [k for k in state if k in mine] or [k for k in state if k.split(".", 1)[1] in mine]
    assert shared, "the loaded model holds the checkpoint's tensors"
    for k in shared[:5]:
        torch.testing.assert_close(mine.get(k, mine.get(k.split(".", 1)[1])), state[k])


def test_a_failed_export_leaves_nothing(quick_demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mmgrid.registry.hf as hf
    from mmgrid.errors import RegistryError

    g = Grid.open(quick_demo)
    cid = _one(g, "text")

    def full_disk(path: Path, data: bytes, mode: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf, "_write", full_disk)
    with pytest.raises(RegistryError, match="No space left"):
        g.registry.export_hf(cid, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_export_to_a_folder_whose_name_is_not_utf8(quick_demo: Path, tmp_path: Path) -> None:
    g = Grid.open(quick_demo)
    target = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9-export"))
    out = g.registry.export_hf(_one(g, "text"), target)
    assert (out / "model.safetensors").stat().st_size > 1000


def test_a_registry_under_a_folder_name_that_is_not_utf8(tmp_path: Path) -> None:
    """safetensors opens UTF-8 paths only: a verified blob is read, and exported, all the same."""
    from mmgrid import Registry

    root = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9")) / "registry"
    reg = Registry.open(root)
    cid = reg.put({"w": torch.arange(6.0).reshape(2, 3)}, {"paradigm": "text", "domain": "Books", "period": "p1"},
                  "trained", files={"config.json": b"{}"})
    for _ in range(2):  # the second read is of a blob already verified in this process
        torch.testing.assert_close(reg.load(cid)["w"], torch.arange(6.0).reshape(2, 3))
    out = reg.export_hf(cid, root.parent / "export")
    from safetensors.torch import load

    torch.testing.assert_close(load((out / "model.safetensors").read_bytes())["w"], torch.arange(6.0).reshape(2, 3))
