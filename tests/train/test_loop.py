"""The training loop: seeded, loss goes down, NaN stops with a clear error."""

from __future__ import annotations

import pytest
import torch

import train_fakes as F
from mmgrid.errors import TrainingError
from mmgrid.train.loop import train_stage


def _setup(seed: int = 0):
    dom = F.make_domain("A")
    par = F.ToyParadigm()
    model = par.build(None, dom, {}, seed)
    return par, model, par.examples(model, dom, "pretrain")


def test_loss_decreases_and_same_seed_is_bitwise_identical() -> None:
    par, m1, ex = _setup()
    log1 = train_stage(par, m1, ex, epochs=4, lr=0.02, batch_size=8, seed=3, progress=False)
    assert log1.epoch_losses[-1] < log1.epoch_losses[0]
    assert log1.steps == 4 * 15 and log1.seeds["torch"] == 3  # 120 examples / 8 -> 15 batches
    par, m2, ex = _setup()
    train_stage(par, m2, ex, epochs=4, lr=0.02, batch_size=8, seed=3, progress=False)
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k


def test_foreach_adamw_is_bit_identical_to_the_per_parameter_loop() -> None:
    # train_stage uses AdamW(foreach=True) for speed; it must compute exactly what the
    # per-parameter implementation (foreach=False, the CPU default) computes
    par, m1, ex = _setup()
    train_stage(par, m1, ex, epochs=2, lr=0.02, batch_size=8, seed=5, weight_decay=0.01, progress=False)
    par, m2, ex = _setup()
    orig = torch.optim.AdamW
    try:
        torch.optim.AdamW = lambda *a, **k: orig(*a, **{**k, "foreach": False})  # type: ignore[misc]
        train_stage(par, m2, ex, epochs=2, lr=0.02, batch_size=8, seed=5, weight_decay=0.01, progress=False)
    finally:
        torch.optim.AdamW = orig  # type: ignore[misc]
    moved = 0
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
        moved += 1
    par, m0, _ = _setup()
    assert moved and not torch.equal(m0.proj.weight, m1.proj.weight)  # training did change the weights


def test_other_seed_differs_and_max_examples_caps() -> None:
    par, m1, ex = _setup()
    train_stage(par, m1, ex, epochs=1, lr=0.02, batch_size=8, seed=1, progress=False)
    par, m2, ex = _setup()
    log = train_stage(par, m2, ex, epochs=1, lr=0.02, batch_size=8, seed=2, progress=False, max_examples=10)
    assert log.examples == 10 and log.steps == 2
    assert not torch.equal(m1.proj.weight, m2.proj.weight)


def test_nan_loss_raises_training_error_naming_the_stage() -> None:
    par, m, ex = _setup()
    F.NAN_AT.add(("A", "pretrain"))
    try:
        with pytest.raises(TrainingError, match=r"toy/A/pretrain.*nan.*step 0"):
            train_stage(par, m, ex, epochs=1, lr=0.02, batch_size=8, seed=0, progress=False, where="toy/A/pretrain")
    finally:
        F.NAN_AT.clear()


def _run_torchrun(cmd: list[str], env: dict, tries: int = 3) -> None:
    """Run a 2-process torchrun; where it exits non-zero, run it again (up to ``tries`` times in all) and say so.

    A fresh-clone CI run once saw this launch exit 1 while it passes on every rerun; its stderr was not kept.
    A launch that fails is retried with the failure shown as a warning (so a flaky start is visible, not
    hidden); one that fails ``tries`` times fails the test with its stderr. What the test checks, that the two
    processes follow the one-process trajectory, is asserted on the run that finished."""
    import subprocess
    import warnings

    for attempt in range(1, tries + 1):
        proc = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
        if proc.returncode == 0:
            return
        if attempt < tries:
            warnings.warn(f"torchrun attempt {attempt} exited {proc.returncode}; running it again. "
                          f"stderr:\n{proc.stderr[-2000:]}", RuntimeWarning)
    pytest.fail(f"torchrun exited {proc.returncode} in {tries} attempts; the last stderr:\n{proc.stderr[-3000:]}")


@pytest.mark.slow
def test_torchrun_two_processes_follow_the_one_process_trajectory(tmp_path) -> None:
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    script = str(Path(__file__).resolve().parent / "ddp_stage.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("WORLD_SIZE", None)
    subprocess.run([sys.executable, script, str(tmp_path / "one.safetensors")], check=True, env=env, timeout=300)
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", script, str(tmp_path / "two.safetensors")]
    _run_torchrun(cmd, env)
    one, two = load_file(tmp_path / "one.safetensors"), load_file(tmp_path / "two.safetensors")
    for k in one:
        torch.testing.assert_close(one[k], two[k], rtol=1e-5, atol=1e-6)


def test_a_task_asking_for_the_fused_adamw_gets_it_and_the_same_training_up_to_rounding() -> None:
    from mmgrid.train import loop

    made = []
    orig = loop.adamw
    loop.adamw = lambda *a, **k: made.append(orig(*a, **k)) or made[-1]  # type: ignore[assignment]
    try:
        par, m1, ex = _setup()
        train_stage(par, m1, ex, epochs=2, lr=0.02, batch_size=8, seed=5, weight_decay=0.01, progress=False)
        par, m2, ex = _setup()
        par.fused_optimizer = True
        train_stage(par, m2, ex, epochs=2, lr=0.02, batch_size=8, seed=5, weight_decay=0.01, progress=False)
    finally:
        loop.adamw = orig  # type: ignore[assignment]
    assert not made[0].defaults["fused"] and made[0].defaults["foreach"]
    assert made[1].defaults["fused"]
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=k)
    par, m0, _ = _setup()
    assert not torch.equal(m0.proj.weight, m2.proj.weight)


def test_stage_settings_equal_the_same_keywords_and_not_both() -> None:
    from mmgrid.train.loop import StageSettings, TrainTask

    par, m1, ex = _setup()
    assert isinstance(par, TrainTask)  # the protocol names what the loop reads
    log1 = train_stage(par, m1, ex, StageSettings(epochs=2, lr=0.02, batch_size=8, seed=4, max_examples=50),
                       progress=False)
    par, m2, ex = _setup()
    log2 = train_stage(par, m2, ex, epochs=2, lr=0.02, batch_size=8, seed=4, max_examples=50, progress=False)
    assert log1.examples == log2.examples == 50 and log1.epoch_losses == log2.epoch_losses
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    with pytest.raises(TypeError, match="not both"):
        train_stage(par, m2, ex, StageSettings(epochs=1, lr=0.02, batch_size=8, seed=0), lr=0.1, progress=False)
    with pytest.raises(TypeError):  # an unknown setting is refused by name
        train_stage(par, m2, ex, epochs=1, lr=0.02, batch_size=8, seed=0, learning_rate=0.1, progress=False)
