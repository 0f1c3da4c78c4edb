"""The documented out-of-tree merge method and study (docs/extending.md), installed as
distributions beside a copy of the quick demo: `mmgrid plugins` lists them, `mmgrid merge` stores
the method's formula, a cross-domain sweep with two worker processes runs it (the workers find the
plugin themselves) and records the same numbers as evaluating that formula here, the Python API
of the page works without packaging, and `mmgrid study` runs the plugin study."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.plugin_site import SIGN_CONSENSUS, TV_NORM, doc_block, install, sign_consensus_site
from tests.workflow.conftest import REPO

pytestmark = pytest.mark.slow


def _copy(demo: Path, dest: Path) -> Path:
    shutil.copytree(demo, dest, symlinks=True, ignore=shutil.ignore_patterns("index.sqlite*"))
    run = dest / "mmgrid-run.yaml"
    run.write_text(run.read_text().replace(str(demo.resolve()), str(dest)))
    return dest


def _env(*paths: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO)]), "MMGRID_QUIET": "1"}
    env.pop("MMGRID_REGISTRY", None)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    assert proc.returncode == 0, f"{args}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _formula(inputs: list[dict], base: dict, scale: float) -> dict:
    """docs/extending.md's sign_consensus, written out again: theta_0 + scale * mean tau where all tau agree."""
    out = {}
    for k, b in base.items():
        taus = [m[k].double() - b.double() for m in inputs]
        agree = torch.ones_like(taus[0], dtype=torch.bool)
        for t in taus:
            agree &= torch.sign(t) == torch.sign(taus[0])
        agree &= taus[0] != 0
        out[k] = b.double() + scale * (sum(taus) / len(taus)) * agree
    return out


def _check_formula(reg, merged_id: str, inputs: list[str], base: str, scale: float) -> None:
    got = reg.load(merged_id)
    want = _formula([reg.load(i) for i in inputs], reg.load(base), scale)
    assert set(got) == set(want) and len(got) > 10
    moved = 0
    for k, w in want.items():
        assert got[k].shape == w.shape and torch.allclose(got[k].double(), w, rtol=0, atol=1e-6), k
        moved += int((got[k].double() != reg.load(base)[k].double()).sum())
    assert moved > 0  # some entries agree in sign: the merge is not the base


def test_an_out_of_tree_method_and_study_through_the_cli_and_a_two_worker_sweep(quick_demo: Path,
                                                                                tmp_path: Path) -> None:
    from mmgrid.config.runfile import load_run
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry import Registry
    from mmgrid.runtime.context import forget
    from mmgrid.sweep.evaluation import default_evaluator_factory
    from mmgrid.sweep.merged_eval import MergedEvaluators
    from mmgrid.sweep.results import study_frame

    run = _copy(quick_demo, tmp_path / "runs" / "demo")
    site = sign_consensus_site(tmp_path / "site")
    install(site, "mmgrid-tv-norm", {"mmgrid_tv_norm": TV_NORM}, {"mmgrid.studies": {"tv_norm": "mmgrid_tv_norm:STUDY"}})
    env, cwd = _env(site), tmp_path

    listed = _run(["-m", "mmgrid", "plugins", "--plugins-only"], env, cwd).stdout
    assert re.search(r"sign_consensus +distribution mmgrid-sign-consensus 0\.1\.0 \(entry point "
                     r"mmgrid\.merge_methods: sign_consensus = mmgrid_sign_consensus:SignConsensus\)", listed)
    assert re.search(r"tv_norm +distribution mmgrid-tv-norm 0\.1\.0", listed) and "average" not in listed

    # `mmgrid merge`, as the page shows it
    aliases = ("books-emb-p2", "phones-emb-p2", "books-emb-pretrain")
    merged = _run(["-m", "mmgrid", "merge", "--registry", str(run), "--method", "sign_consensus", "--set", "scale=0.5",
                   "--inputs", aliases[0], aliases[1], "--base", aliases[2]], env, cwd).stdout.split()[-1]
    forget()
    reg = Registry.open(run / "registry")
    a, b, base = (reg.resolve(x) for x in aliases)
    _check_formula(reg, merged, [a, b], base, 0.5)
    assert reg.get(merged).meta["merge"]["method"] == "sign_consensus"

    # a cross-domain sweep with two worker processes
    proc = subprocess.Popen([sys.executable, "-m", "mmgrid", "sweep", "cross-domain", str(run), "--workers", "2",
                             "sweeps.cross_domain.methods={sign_consensus: {scale: 1.0}}",
                             "sweeps.cross_domain.bases=[original]"],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    assert re.search(r"emb +sign_consensus +original +[-+]\d", out), out
    reg.sync()
    df = study_frame(reg, "cross_domain")
    rows = df[df["method"] == "sign_consensus"]
    assert set(rows["eval_domain"]) == {"Books", "Phones"}
    writers = {p.stem.rsplit("-", 2)[-2] for p in (run / "registry" / "results").glob("*.jsonl")
               if "sign_consensus" in p.read_text()}
    assert writers and str(proc.pid) not in writers  # recorded by a worker process, not by the driver

    # the recorded numbers are those of the formula: the same merge through the CLI, evaluated here
    import json

    recipe = rows.iloc[0]["recipe"]
    recipe = recipe if isinstance(recipe, dict) else json.loads(recipe)
    assert recipe["inputs"] == [a, reg.resolve("phones-emb-p2")] and recipe["params"] == {"scale": 1.0}
    same = _run(["-m", "mmgrid", "merge", "--registry", str(run), "--method", "sign_consensus", "--set", "scale=1.0",
                 "--inputs", *recipe["inputs"], "--base", recipe["base"]], env, cwd).stdout.split()[-1]
    forget()
    reg = Registry.open(run / "registry")
    _check_formula(reg, same, recipe["inputs"], recipe["base"], 1.0)
    cfg = load_run(run / "mmgrid-run.yaml")
    evals = MergedEvaluators(cfg, reg, load_prepared(cfg.prepared), default_evaluator_factory)
    state = reg.load(same)
    for domain, p2 in (("Books", recipe["inputs"][0]), ("Phones", recipe["inputs"][1])):
        here = evals.evaluate_state("emb", domain, p2, state, {})
        for group in ("all", "non_active"):
            sel = rows[(rows["eval_domain"] == domain) & (rows["group"] == group)]
            assert dict(zip(sel["metric"], sel["value"])) == pytest.approx(here[group], rel=0, abs=1e-12)

    # the page's Python API, without packaging: only the module on the path
    pyonly = tmp_path / "pyonly"
    pyonly.mkdir()
    (pyonly / "mmgrid_sign_consensus.py").write_text(SIGN_CONSENSUS)
    shown = _run(["-c", doc_block(1)], _env(pyonly), cwd).stdout
    assert re.search(r"^\d+ tensors merged$", shown.strip()), shown

    # the page's study, through `mmgrid study`
    text = _run(["-m", "mmgrid", "study", "tv_norm", str(run)], env, cwd).stdout
    forget()
    reg = Registry.open(run / "registry")
    t1, t2 = reg.resolve("books-emb-p1"), reg.resolve("books-emb-p2")
    s1, s2 = reg.load(t1), reg.load(t2)
    norm = sum(float((s2[k].float() - s1[k].float()).pow(2).sum()) for k in s1) ** 0.5
    shown_norm = float(re.search(r"Books: \|\|theta_t2 - theta_t1\|\| = ([\d.]+)", text).group(1))
    assert shown_norm == pytest.approx(norm, abs=1e-4) and norm > 0
    recorded = study_frame(reg, "tv_norm")
    assert set(recorded["domain"]) == {"Books", "Phones"}
    assert float(recorded[recorded["domain"] == "Books"]["value"].iloc[0]) == pytest.approx(norm, rel=1e-9)

    bad = subprocess.run([sys.executable, "-m", "mmgrid", "study", "tv_nrom", str(run)], capture_output=True,
                         text=True, env=env, cwd=cwd, timeout=600)
    assert bad.returncode == 2 and "unknown study 'tv_nrom'" in bad.stderr and "Did you mean 'tv_norm'" in bad.stderr
    assert "Traceback" not in bad.stderr
