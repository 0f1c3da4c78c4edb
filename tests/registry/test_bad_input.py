"""Bad input gets named errors that say what to do; pickles are never opened."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mmgrid.errors import RegistryError
from mmgrid.registry.api import Registry
from mmgrid.registry.errors import InvalidNameError, UnknownCheckpointError, UnsafeFormatError

from .conftest import COORDS, tiny_state


class Boom:
    """Unpickling this would run code; the registry must never get that far."""

    def __reduce__(self):  # noqa: ANN204
        return (Path("/nonexistent-should-never-run").mkdir, ())


@pytest.mark.parametrize("suffix", [".bin", ".pt", ".pkl", ".pth", ".ckpt"])
def test_pickle_checkpoints_are_refused(reg: Registry, tmp_path: Path, suffix: str) -> None:
    f = tmp_path / f"model{suffix}"
    f.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(UnsafeFormatError, match="safetensors") as err:
        reg.put(f, COORDS, "base")
    assert "save_file" in str(err.value) or "safe_serialization" in str(err.value)
    folder = tmp_path / f"hf{suffix}"
    folder.mkdir()
    (folder / f"pytorch_model{suffix}").write_bytes(pickle.dumps(Boom()))
    (folder / "config.json").write_text("{}")
    with pytest.raises(UnsafeFormatError, match="safetensors"):
        reg.put(folder, COORDS, "base")
    with pytest.raises(UnsafeFormatError, match="safetensors"):
        reg.import_hf(folder, COORDS)
    assert reg.query().empty


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "", ".hidden", "x" * 200, "sp ace"])
def test_bad_alias_refused(reg: Registry, name: str) -> None:
    cid = reg.put(tiny_state(0), COORDS, "base")
    with pytest.raises(InvalidNameError, match="alias"):
        reg.alias(name, cid)
    assert not list((reg.root.parent).glob("x*"))


@pytest.mark.parametrize(
    "coords",
    [{"paradigm": "text", "domain": "Books"}, {**COORDS, "domain": "../etc"}, {**COORDS, "period": "a/b"},
     {**COORDS, "bad key": 1}, {**COORDS, "lambda": float("nan")}, {**COORDS, "variant": 3}, "text/Books/p0"],
)
def test_bad_coords_refused(reg: Registry, coords) -> None:  # noqa: ANN001
    with pytest.raises(InvalidNameError):
        reg.put(tiny_state(0), coords, "base")


def test_other_bad_input(reg: Registry) -> None:
    sd = tiny_state(0)
    with pytest.raises(InvalidNameError, match="kind"):
        reg.put(sd, COORDS, "finetuned")
    with pytest.raises(InvalidNameError, match="role"):
        reg.put(sd, COORDS, "trained", parents=[("ab" * 8, "father")])
    with pytest.raises(UnknownCheckpointError, match="parent"):
        reg.put(sd, COORDS, "trained", parents=[("ab" * 8, "previous_stage")])
    with pytest.raises(RegistryError, match="not a tensor"):
        reg.put({"w": [1, 2]}, COORDS, "base")
    with pytest.raises(RegistryError, match="no tensors"):
        reg.put({}, COORDS, "base")
    with pytest.raises(InvalidNameError, match="file name"):
        reg.put(sd, COORDS, "base", files={"../config.json": b"{}"})
    with pytest.raises(RegistryError, match="JSON"):
        reg.put(sd, COORDS, "base", meta={"x": object()})
    with pytest.raises(InvalidNameError, match="JSON"):
        reg.put(sd, COORDS, "base", params={"x": {1, 2}})
    with pytest.raises(UnknownCheckpointError, match="no checkpoint"):
        reg.load("0123456789abcdef")
    with pytest.raises(UnknownCheckpointError, match="no checkpoint"):
        reg.record_eval("nope", "test", "all", {"r": 1.0})
    cid = reg.put(sd, COORDS, "base")
    with pytest.raises(UnknownCheckpointError, match="no file"):
        reg.file(cid, "tokenizer.json")
    with pytest.raises(RegistryError, match="number"):
        reg.record_eval(cid, "test", "all", {"r": "high"})
    with pytest.raises(RegistryError, match="recipe"):
        reg.record_eval(None, "test", "all", {"r": 1.0})
    with pytest.raises(RegistryError, match="not a .safetensors"):
        reg.put(Path(__file__), {**COORDS, "period": "p8"}, "base")
    with pytest.raises(RegistryError, match="does not exist"):
        reg.put(Path("/nonexistent/x.safetensors"), {**COORDS, "period": "p8"}, "base")
    bad = reg.root.parent / "bad.safetensors"
    bad.write_bytes(b"\x00" * 20)
    with pytest.raises(RegistryError, match="not a valid safetensors"):
        reg.put(bad, {**COORDS, "period": "p9"}, "base")
    with pytest.raises(RegistryError, match="is a file"):
        Registry.open(bad)
    assert torch.equal(reg.load(cid)["model.position_ids"], sd["model.position_ids"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_or_inf_refused_before_anything_is_written(reg: Registry, tmp_path: Path, dtype: torch.dtype, bad: float) -> None:
    from mmgrid.registry.errors import NonFiniteTensorError

    sd = tiny_state(0, dtype)
    sd["model.layers.1.mlp.weight"][3, 2] = bad
    before = sorted(p for p in reg.root.rglob("*") if "index.sqlite" not in p.name)
    with pytest.raises(NonFiniteTensorError, match=r"tensor 'model.layers.1.mlp.weight' .* holds") as err:
        reg.put(sd, COORDS, "base", files={"config.json": b"{}"})
    nan, inf = (1, 0) if bad != bad else (0, 1)
    assert f"{nan} NaN and {inf} Inf" in str(err.value) and "nothing was stored" in str(err.value)
    path = tmp_path / "nan.safetensors"  # streamed from a file: the same refusal
    save_file(sd, str(path))
    with pytest.raises(NonFiniteTensorError, match="model.layers.1.mlp.weight"):
        reg.put(path, COORDS, "base")
    after = sorted(p for p in reg.root.rglob("*") if "index.sqlite" not in p.name)
    assert after == before and reg.query().empty  # no blob, file, manifest or temporary file


def test_identity_already_stored_is_compared_with_the_input(reg: Registry, tmp_path: Path) -> None:
    from mmgrid.registry.errors import IdentityConflictError

    sd = tiny_state(0)
    cid = reg.put(sd, COORDS, "base")
    assert reg.put(tiny_state(0), COORDS, "base") == cid  # same content: the same id, nothing new
    path = tmp_path / "same.safetensors"
    save_file(sd, str(path))
    assert reg.put(path, COORDS, "base") == cid  # names/shapes/dtypes read from the file header
    cases = {
        "shape": {**sd, "model.layers.0.mlp.weight": torch.zeros(8, 9)},
        "dtype": {**sd, "model.layers.0.mlp.weight": torch.zeros(8, 8, dtype=torch.float16)},
        "absent": {k: v for k, v in sd.items() if k != "model.position_ids"},
        "not stored": {**sd, "extra": torch.zeros(1)},
    }
    for what, other in cases.items():
        with pytest.raises(IdentityConflictError, match=f"already stored with different content: .*{what}") as err:
            reg.put(other, COORDS, "base")
        assert cid in str(err.value) and "another identity" in str(err.value)
    assert len(reg.query()) == 1 and len(reg.store.iter_blobs()) == 5  # 6 tensors, the two norms equal


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.float8_e5m2])
def test_finite_check_finds_one_bad_value_anywhere(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every position (vector lanes, chunk tails, non-contiguous views), several chunks."""
    from mmgrid.registry import writing
    from mmgrid.registry.errors import NonFiniteTensorError

    monkeypatch.setattr(writing, "FINITE_CHUNK", 40)
    writing.check_finite("ok", torch.randn(3, 37).to(dtype))
    for pos in range(0, 111, 1):
        for bad in (float("nan"), float("inf"), float("-inf")):
            t = torch.randn(37, 3).to(dtype).t()  # non-contiguous
            t[pos % 3, pos // 3] = bad
            with pytest.raises(NonFiniteTensorError, match="'w'"):
                writing.check_finite("w", t)


def test_registry_cli_bad_arguments_are_named(reg: Registry, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from mmgrid.cli import main

    reg.put(tiny_state(0), COORDS, "base")
    n = len(reg.store.iter_blobs())
    for grace in ("-5", "nan"):
        assert main(["registry", "gc", str(reg.root), "--grace", grace]) == 2
        assert ">= 0" in capsys.readouterr().err
    assert len(reg.store.iter_blobs()) == n
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(RegistryError, match="cannot create the registry folders"):
        Registry.open(blocker / "reg")  # its parent is a file: the folders cannot be made
    assert blocker.read_text() == "x"
