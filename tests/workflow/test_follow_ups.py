"""A researcher's day on a built grid, each reproduced on a quick demo:
follow-up commands take the run they follow, KEY=VALUE is honoured or refused by name, one way
to name a registry, a closed pipe is quiet, merge parameters have one spelling."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.workflow.conftest import REPO, mmgrid

pytestmark = pytest.mark.slow


def _ids(demo: Path, *filters: str) -> list[str]:
    proc = mmgrid("query", "--registry", str(demo), *filters, "--columns", "id", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    return pd.read_csv(io.StringIO(proc.stdout))["id"].tolist()


def test_the_demo_saves_its_run_and_the_aliases_the_readme_uses(quick_demo: Path) -> None:
    saved = (quick_demo / "mmgrid-run.yaml").read_text()
    assert "grid hash" in saved
    import yaml
    run = yaml.safe_load(saved)  # paths relative to the run folder: the run still works after mv or cp -a
    assert (run["registry"], run["prepared"], run["data"]["root"]) == ("registry", "prepared", "world")
    assert run["run"] == {"format": 2}  # nothing outside the run folder
    for alias in ("books-best", "phones-best"):
        proc = mmgrid("show", alias, "--registry", str(quick_demo))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["coords"]["domain"] == alias.split("-")[0].capitalize()


def test_a_follow_up_reuses_the_saved_run_without_repeating_overrides(quick_demo: Path) -> None:
    # the quick demo's overrides (2 seeds, 2 domains, lambda step 0.25) come from mmgrid-run.yaml:
    # the sweep finds every point it needs already recorded
    before = len(mmgrid("results", "--registry", str(quick_demo), "--study", "temporal", "--format", "csv").stdout)
    proc = mmgrid("sweep", "temporal", str(quick_demo))
    assert proc.returncode == 0, proc.stderr
    assert "lambda*" in proc.stdout
    after = len(mmgrid("results", "--registry", str(quick_demo), "--study", "temporal", "--format", "csv").stdout)
    assert after == before  # nothing new was evaluated: the same config as the demo's


def test_a_config_that_disagrees_with_the_registry_is_named_before_any_work(quick_demo: Path) -> None:
    proc = mmgrid("sweep", "temporal", "--registry", str(quick_demo / "registry"), "train.seeds=[0,1,2]")
    assert proc.returncode == 2
    err = proc.stderr
    assert "does not match the registry" in err and "train.seeds names [0, 1, 2]" in err
    assert "pass train.seeds=[0,1]" in err and "nothing was run" in err
    proc = mmgrid("sweep", "temporal", str(quick_demo), "sweeps.temporal.variant=nope")
    assert proc.returncode == 2 and "variant 'nope' is not in the registry" in proc.stderr


def test_eval_honours_overrides_and_refuses_unknown_ones(quick_demo: Path) -> None:
    proc = mmgrid("eval", "--registry", str(quick_demo), "books-best", "--no-record", "eval.max_users=50")
    assert proc.returncode == 0, proc.stderr
    assert "all        n=50 " in proc.stdout  # not the 100 the quick demo's config says
    proc = mmgrid("eval", "--registry", str(quick_demo), "books-best", "--no-record", "eval.max_userz=50")
    assert proc.returncode == 2 and "Did you mean 'max_users'" in proc.stderr


def test_eval_of_a_text_checkpoint_on_another_domain_and_a_named_error_for_emb(quick_demo: Path) -> None:
    proc = mmgrid("eval", "--registry", str(quick_demo), "books-text-p2", "--domain", "Phones", "--no-record")
    assert proc.returncode == 0, proc.stderr
    assert "on Phones/test" in proc.stdout
    emb = _ids(quick_demo, "--paradigm", "emb", "--domain", "Books", "--period", "p2", "--seed", "0",
               "--kind", "trained", "--variant", "default")[0]
    proc = mmgrid("eval", "--registry", str(quick_demo), emb, "--domain", "Phones", "--no-record")
    assert proc.returncode == 2
    assert "ranks Books's items only" in proc.stderr and "Traceback" not in proc.stderr


def test_one_way_to_name_a_registry(quick_demo: Path, tmp_path: Path) -> None:
    reg = str(quick_demo / "registry")
    by_flag = mmgrid("query", "--registry", reg, "--format", "csv").stdout
    assert by_flag.count("\n") > 10
    assert mmgrid("query", "--registry", str(quick_demo), "--format", "csv").stdout == by_flag  # the run folder
    assert mmgrid("query", "--format", "csv", env={"MMGRID_REGISTRY": reg}, cwd=tmp_path).stdout == by_flag
    assert mmgrid("query", "--format", "csv", cwd=quick_demo).stdout == by_flag  # the run in the current folder
    old = mmgrid("query", reg, "--format", "csv")  # the old positional ROOT still works, with a note
    assert old.stdout == by_flag and "deprecated" in old.stderr and "--registry" in old.stderr
    for cmd in (["lineage", "books-best"], ["show", "books-best"], ["registry", "verify"]):
        proc = mmgrid(*cmd, env={"MMGRID_REGISTRY": str(quick_demo)}, cwd=tmp_path)
        assert proc.returncode == 0, (cmd, proc.stderr)
    # none found: a named error, and no registry skeleton left behind in the current folder
    proc = mmgrid("query", cwd=tmp_path)
    assert proc.returncode == 2 and "which registry?" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_results_filters_and_columns(quick_demo: Path) -> None:
    proc = mmgrid("results", "--registry", str(quick_demo), "--study", "temporal", "--paradigm", "emb", "--metric", "ndcg@10",
                  "--group", "all", "--columns", "domain,lambda,seed,value", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(io.StringIO(proc.stdout))
    assert list(df.columns) == ["domain", "lambda", "seed", "value"]
    assert set(df["seed"]) == {0, 1} and df["lambda"].between(0, 1.5).all()
    assert len(df) == 2 * 2 * 7  # domains x seeds x lambdas 0..1.5 step 0.25
    bad = mmgrid("results", "--registry", str(quick_demo), "--columns", "domain,nope")
    assert bad.returncode == 2 and "'nope'" in bad.stderr


def test_a_closed_pipe_exits_quietly(quick_demo: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "mmgrid", "results", "--registry", str(quick_demo)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_merge_parameters_have_one_spelling(quick_demo: Path, tmp_path: Path) -> None:
    t1, t2 = (_ids(quick_demo, "--paradigm", "emb", "--domain", "Phones", "--period", p, "--seed", "0",
                   "--kind", "trained", "--variant", "default")[0] for p in ("p1", "p2"))
    base = ["merge", "--registry", str(quick_demo), "--method", "temporal", "--inputs", t1, t2]
    a = mmgrid(*base, "--set", "lambda=0.7")
    b = mmgrid(*base, "--set", "lam=0.7")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout  # one checkpoint, not two with identical tensors
    shown = json.loads(mmgrid("show", a.stdout.strip(), "--registry", str(quick_demo)).stdout)
    assert shown["params"] == {"method": "temporal", "lam": 0.7}
    twice = mmgrid(*base, "--set", "lam=1.3", "--set", "lambda=0.5")
    assert twice.returncode == 2 and "given twice" in twice.stderr
    # an overflowing value: named before the registry is opened (a missing one is not created)
    nowhere = tmp_path / "reg"
    huge = mmgrid("merge", "--registry", str(nowhere), "--method", "temporal", "--inputs", t1, t2, "--set", "lam=1e308")
    assert huge.returncode == 2 and "float32" in huge.stderr and not nowhere.exists()


def test_prepared_data_the_registry_was_not_trained_on_is_named(quick_demo: Path, tmp_path: Path) -> None:
    world = mmgrid("world", "--out", str(tmp_path / "w"), "--domains", "2", "--scale", "0.3", "--seed", "5")
    assert world.returncode == 0, world.stderr
    prep = mmgrid("prepare", str(quick_demo), f"data.root={tmp_path / 'w'}", "--out", str(tmp_path / "p"))
    assert prep.returncode == 0, prep.stderr
    proc = mmgrid("sweep", "temporal", str(quick_demo), f"prepared={tmp_path / 'p'}")
    assert proc.returncode == 2
    assert "is not the data the registry's checkpoints were trained on" in proc.stderr


def test_report_out_saves_the_run_and_a_follow_up_names_the_report_folder(quick_demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    proc = mmgrid("report", str(quick_demo), "--out", str(out), "--no-diagnostics")
    assert proc.returncode == 0, proc.stderr
    saved = out / "mmgrid-run.yaml"
    assert saved.is_file() and (out / "report.md").is_file()
    import yaml
    run = yaml.safe_load(saved.read_text())
    assert run["registry"] == str((quick_demo / "registry").resolve())  # outside the report folder: absolute,
    assert run["run"]["external"] == ["registry", "prepared", "data.root"]  # and announced as such
    assert run["train"]["seeds"] == yaml.safe_load((quick_demo / "mmgrid-run.yaml").read_text())["train"]["seeds"]
    # the report folder now names the run: its registry, and the grid a study runs on
    by_report = mmgrid("query", "--registry", str(out), "--format", "csv", "--columns", "id").stdout
    assert by_report.count("\n") > 10
    assert by_report == mmgrid("query", "--registry", str(quick_demo), "--format", "csv", "--columns", "id").stdout
    proc = mmgrid("sweep", "temporal", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "lambda*" in proc.stdout


def _saved_run_with(quick_demo: Path, folder: Path, edit) -> Path:
    """A copy of the demo's saved run with ``edit(dict)`` applied, in ``folder`` (its paths
    absolute and announced as outside the folder: it uses the demo's registry and data)."""
    import yaml

    from mmgrid.config.runfile import PATH_FIELDS, read_run
    data = {"run": {"format": 2, "external": list(PATH_FIELDS)}, **read_run(quick_demo / "mmgrid-run.yaml").grid}
    edit(data)
    folder.mkdir(parents=True)
    (folder / "mmgrid-run.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def test_a_saved_run_whose_training_knob_differs_is_refused_by_name(quick_demo: Path, tmp_path: Path) -> None:
    run = _saved_run_with(quick_demo, tmp_path / "lr", lambda d: d["train"].update(lr=0.123))
    before = sorted(p.name for p in (quick_demo / "registry" / "manifests").rglob("*"))
    proc = mmgrid("sweep", "temporal", str(run))
    assert proc.returncode == 2
    assert "train.lr: the config says 0.123" in proc.stderr and "trained with 0.001" in proc.stderr
    assert "pass train.lr=0.001" in proc.stderr and "nothing was run" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (quick_demo / "registry" / "manifests").rglob("*")) == before  # no work


def test_a_saved_run_that_differs_only_in_a_path_spelling_is_accepted(quick_demo: Path, tmp_path: Path) -> None:
    # data.root spelled another way (the manifests' config_hash covers that spelling: not compared)
    root = (quick_demo / yaml_load(quick_demo)["data"]["root"]).resolve()
    other = f"{root.parent}/./../{root.parent.name}/{root.name}/"
    run = _saved_run_with(quick_demo, tmp_path / "path", lambda d: d["data"].update(root=other))
    proc = mmgrid("sweep", "temporal", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "lambda*" in proc.stdout


def yaml_load(demo: Path) -> dict:
    import yaml
    return yaml.safe_load((demo / "mmgrid-run.yaml").read_text())


def test_training_mismatches_name_each_knob_with_its_grid_key(quick_demo: Path) -> None:
    """In process, against the demo's registry: each training knob in a stage's stored params
    maps to the grid key a user would pass; paths and sweep/eval settings never count."""
    from mmgrid.cli.context import check_against_registry, load_config
    from mmgrid.errors import ConfigError
    from mmgrid.registry.api import Registry

    reg = Registry.open(quick_demo / "registry")
    par = "semid"

    def check(*overrides: str) -> None:
        cfg = load_config(str(quick_demo), list(overrides))
        check_against_registry(cfg, reg, [par], ["default"], None, None, command="test")

    check()  # the saved run itself matches
    check("data.root=" + str(quick_demo / yaml_load(quick_demo)["data"]["root"]) + "/.", "eval.max_users=7", "exec.workers=3",
          "sweeps.temporal.step=0.5")
    cases = {"train.weight_decay=0.5": "train.weight_decay: the config says 0.5",
             "train.batch_size=3": "train.batch_size: the config says 3",
             "train.epochs.p1=9": "train.epochs.p1: the config says 9"}
    for override, named in cases.items():
        with pytest.raises(ConfigError) as info:
            check(override)
        assert named in str(info.value), (override, str(info.value))
        assert str(info.value).count("train.") >= 1 and "nothing was run" in str(info.value)


def test_calibrate_takes_the_run_folder_and_its_saved_grid(quick_demo: Path, monkeypatch, tmp_path: Path) -> None:
    # the study itself is long: stop at its entry and look at the grid it was handed
    import yaml

    from mmgrid.cli import main
    from mmgrid.sweep.calibration import study

    seen = {}

    def fake_run(cfg, out, executor=None):  # noqa: ANN001, ANN202
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(study, "run_calibration", fake_run)
    with pytest.raises(SystemExit):
        main(["calibrate", str(quick_demo), "--out", str(tmp_path / "cal"), "exec.workers=1"])
    saved = yaml.safe_load((quick_demo / "mmgrid-run.yaml").read_text())
    cfg = seen["cfg"]
    assert list(cfg.train.seeds) == list(saved["train"]["seeds"])  # the run's seeds, not the packaged demo's
    assert cfg.world.n_domains == saved["world"]["n_domains"] == 2


def test_a_damaged_per_user_file_fails_the_report_by_name_and_writes_nothing(quick_demo: Path, tmp_path: Path) -> None:
    # a truncated per-user parquet used to shrink a finding's evidence silently and flip its verdict
    import shutil

    reg = tmp_path / "registry"
    shutil.copytree(quick_demo / "registry", reg)
    files = sorted((reg / "peruser").rglob("*.parquet"))
    assert files
    for f in files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    out = tmp_path / "report"
    proc = mmgrid("report", str(quick_demo), "--registry", str(reg), "--out", str(out), "--no-diagnostics")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "peruser" in proc.stderr and "registry verify" in proc.stderr, proc.stderr[-2000:]
    assert not (out / "report.md").exists()
