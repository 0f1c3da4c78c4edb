"""``mmgrid build GRID --rehearse``: the paper grid's own code path at toy size, in its own folder."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmgrid.config import WorldConfig, load_grid
from mmgrid.errors import ConfigError
from mmgrid.cli.rehearse import (Rehearsal, RehearsalPlan, rehearsal_data, rehearsal_folder, rehearsal_inputs, rehearse,
                             toy_grid)

STAGES = ["pretrain", "p1", "p2"]


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mmgrid", *args], capture_output=True, text=True, timeout=1200,
                          cwd=cwd)


@pytest.mark.slow
def test_rehearsal_of_the_paper_grid_runs_every_stage_type_every_study_and_the_report(tmp_path: Path) -> None:
    out = tmp_path / "rehearsal"
    proc = _cli(["build", "amazon2023", "--rehearse", "--out", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    text = proc.stdout
    assert "(every step ran)" in text
    for step in ("data", "prepare", "build (every stage type)", "evaluation (baseline table)", "temporal sweep",
                 "cross-domain sweep", "lambda* prediction", "continual merging", "report"):
        assert f"ok  {step}" in text
    # what was substituted is said: random weights for the absent base and embedder, synthetic data
    assert "Qwen/Qwen3-0.6B -> random weights, Qwen3ForCausalLM" in text
    assert "tied embeddings" in text and "no BOS token" in text
    assert "models/Qwen3-Embedding-8B: random weights: absent" in text
    assert "synthetic: no raw files" in text
    assert "bfloat16 kept" in text and "cuda -> cpu" in text
    assert "real grid                    warns: base.model 'Qwen/Qwen3-0.6B' is a hub id" in text

    from mmgrid import Registry

    grid = load_grid("amazon2023")
    domains = grid.data.domains[:3]
    reg = Registry.open(out / "registry")
    trained = reg.query(kind="trained", variant="default")
    cells = set(zip(trained["paradigm"], trained["domain"], trained["period"]))
    # every stage type: each paradigm of the grid x each rehearsed domain (the grid's own names) x each stage
    assert {(p, d, s) for p in grid.paradigms for d in domains for s in STAGES} <= cells
    assert len(reg.query(kind="base", paradigm="base")) == 1
    res = reg.results()
    assert set(res["study"].dropna()) >= {"temporal", "cross_domain", "lambda_hat", "temporal_continual"}
    cross = res[res["study"] == "cross_domain"]
    ran = set(zip(cross["method"], cross["base_kind"]))
    # one merge of each method x base the grid lists, for each paradigm it lists; a weighted average with
    # weights summing to 1 does not depend on the base (theta_b + sum w_i (theta_i - theta_b) = sum w_i theta_i),
    # so it runs once, base "none"
    methods = set(grid.sweeps.cross_domain.methods)
    assert {m for m, _ in ran} == methods | {"single"}  # "single": each domain's own checkpoint, the reference
    assert ("average", "none") in ran
    assert {(m, b) for m in methods - {"average"} for b in grid.sweeps.cross_domain.bases} <= ran
    assert set(cross["paradigm"]) == set(grid.sweeps.cross_domain.paradigms)
    lambdas = sorted(set(res[res["study"] == "temporal"]["lambda"].dropna()))
    assert lambdas == pytest.approx([0.0, 0.75, 1.5], rel=1e-9)  # the grid's [0, 1.5] at three points
    report = (out / "report.md").read_text()
    for heading in ("Table 2", "Figure 5", "Tables 3 and 4"):
        assert heading in report
    # the real grid's folders were never written: the rehearsal has its own registry and data
    assert not (tmp_path / "runs").exists()
    saved = (out / "mmgrid-run.yaml").read_text()
    assert "amazon2023-rehearsal" in saved


@pytest.mark.slow
def test_a_grid_naming_an_absent_model_folder_still_rehearses_with_random_weights(tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = _cli(["build", "amazon2023", "--rehearse", "--out", str(out), f"base.model={tmp_path / 'no-such-model'}",
                 f"paradigm_params.semid.embedder={tmp_path / 'no-such-embedder'}", "paradigms=[semid, sasrec]",
                 "sweeps.cross_domain.paradigms=[semid]", "sweeps.temporal.paradigm=semid",
                 "eval.matrix_paradigms=[semid]"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    # the real grid is refused by `mmgrid build` (no such folder): the rehearsal says so and goes on
    assert "real grid                    REFUSED by `mmgrid build`: base.model" in proc.stdout
    assert f"{tmp_path / 'no-such-model'} -> random weights" in proc.stdout
    assert "is not on disk and names no known architecture" in proc.stdout
    assert "no-such-embedder: random weights: absent: the all-MiniLM-L6-v2 architecture" in proc.stdout
    assert "(every step ran)" in proc.stdout


def test_toy_grid_keeps_the_code_path_and_shrinks_the_sizes(tmp_path: Path) -> None:
    real = load_grid("amazon2023")
    plan = RehearsalPlan(real, tmp_path)
    doms = real.data.domains[:3]
    toy = toy_grid(plan, doms, {"base": str(tmp_path / "base"), "embedder:text": "E", "embedder:semid": "E"},
                   Rehearsal(tmp_path, quiet=True))
    # every field that picks a code path is the real grid's
    assert toy.paradigms == real.paradigms
    assert [(v.name, v.regularizer) for v in toy.variants] == [(v.name, v.regularizer) for v in real.variants]
    assert toy.sweeps.cross_domain.methods == real.sweeps.cross_domain.methods
    assert toy.sweeps.cross_domain.bases == real.sweeps.cross_domain.bases
    assert toy.sweeps.cross_domain.paradigms == real.sweeps.cross_domain.paradigms
    assert toy.sweeps.temporal.paradigm == real.sweeps.temporal.paradigm
    assert toy.train.stages == real.train.stages and toy.train.dtype == "bfloat16"
    assert toy.data.phases == real.data.phases and toy.data.domains == doms
    assert toy.eval.groups == real.eval.groups and toy.eval.retention is True
    assert toy.paradigm_params["semid"]["levels"] == 4
    # every size is shrunk
    assert toy.train.epochs == {"pretrain": 1, "p1": 1, "p2": 1}
    assert toy.train.max_examples == 48 and toy.train.batch_size == 8 and toy.train.device == "cpu"
    assert toy.eval.max_users == 20
    assert toy.paradigm_params["semid"]["codebook_size"] == 8
    assert toy.paradigm_params["emb"]["max_item_tokens"] == 12
    assert toy.paradigm_params["text"]["embedder"] == "E" and toy.paradigm_params["text"]["embedder_device"] == "cpu"
    assert toy.sweeps.cross_domain.alphas == [0.5] and toy.sweeps.cross_domain.pairs == [doms[:2]]
    assert toy.sweeps.temporal.step == pytest.approx(0.75, rel=1e-12)
    # nothing points at the real grid's folders
    for path in (toy.registry, toy.prepared, toy.data.root, toy.paradigm_params["text"]["embed_cache"]):
        assert Path(path).is_relative_to(tmp_path)
    assert toy.exec.executor == "local"


def test_rehearsal_folder_never_overlaps_the_real_grid(tmp_path: Path) -> None:
    real = load_grid("amazon2023", [f"registry={tmp_path / 'runs' / 'registry'}"])
    with pytest.raises(ConfigError, match="overlaps the real grid"):
        rehearsal_folder(real, str(tmp_path / "runs" / "registry"))
    with pytest.raises(ConfigError, match="overlaps the real grid"):
        rehearsal_folder(real, str(tmp_path / "runs"))
    used = tmp_path / "used"
    (used / "registry" / "manifests").mkdir(parents=True)
    with pytest.raises(ConfigError, match="already holds a registry"):
        rehearsal_folder(real, str(used))
    assert rehearsal_folder(real, str(tmp_path / "fresh")) == tmp_path / "fresh"


def _jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt") if path.name.endswith(".gz") else path.open() as fh:
        return [json.loads(line) for line in fh]


def test_real_raw_files_give_the_first_users_of_each_domain_in_the_same_layout(tmp_path: Path) -> None:
    from mmgrid.data.world_files import write_world

    src = tmp_path / "real"
    write_world(src, WorldConfig(seed=3, scale=0.1, n_domains=2))
    names = sorted(p.name.removesuffix(".jsonl.gz") for p in (src / "raw" / "review_categories").iterdir())
    real = load_grid("amazon2023", [f"data.root={src}", f"data.domains={names}"])
    plan = RehearsalPlan(real, tmp_path / "out", users=7)
    log = Rehearsal(plan.out, quiet=True)
    assert rehearsal_data(plan, log) == names
    for dm in names:
        reviews = _jsonl(src / "raw" / "review_categories" / f"{dm}.jsonl.gz")
        first: list[str] = []
        for r in reviews:  # the oracle: the first 7 distinct users in file order, all of their reviews
            if r["user_id"] not in first and len(first) < 7:
                first.append(r["user_id"])
        want = [r for r in reviews if r["user_id"] in first]
        got = _jsonl(plan.out / "data" / "raw" / "review_categories" / f"{dm}.jsonl")
        assert got == want
        meta = _jsonl(plan.out / "data" / "raw" / "meta_categories" / f"meta_{dm}.jsonl")
        assert {m["parent_asin"] for m in meta} == {r["parent_asin"] for r in want}
    assert all("real: the first 7 users" in how for what, how in log.substitutions if what.startswith("data "))


def test_a_failing_step_stops_the_rest_and_fails_the_rehearsal(tmp_path: Path) -> None:
    real = load_grid("amazon2023", ["data.source=recbole"])
    log = rehearse(real, str(tmp_path / "r"))
    assert not log.ok
    assert log.steps[0][0] == "data" and not log.steps[0][2] and "amazon2023 layout only" in log.steps[0][3]
    assert all(note.startswith("not run") for _, _, _, note in log.steps[1:])


def test_out_without_rehearse_is_refused_before_anything_runs(tmp_path: Path) -> None:
    proc = _cli(["build", "amazon2023", "--out", str(tmp_path / "x")], cwd=tmp_path)
    assert proc.returncode != 0
    assert "--out and --rehearse-domains belong to --rehearse" in proc.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "runs").exists()


class _Prepared:
    """What the model step reads of a prepared dataset: the domains' item texts."""

    domains = ["A", "B"]

    def domain(self, name: str) -> "_Prepared":
        return self

    item_texts = [f"item {i} made of words like cable case charger {i % 7}" for i in range(200)]


def test_a_local_model_folder_with_only_its_config_is_shrunk_and_its_embedder_folder_is_written(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, Qwen3Config

    from mmgrid.paradigms.embedder import load_embedder

    folder = tmp_path / "Qwen3-local"
    Qwen3Config(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                head_dim=128, intermediate_size=3072, tie_word_embeddings=True, rope_theta=12345.0, rms_norm_eps=1e-5).save_pretrained(folder)
    real = load_grid("amazon2023", [f"base.model={folder}",
                                    f"paradigm_params.text.embedder={tmp_path / 'Qwen3-Embedding-0.6B'}",
                                    "paradigm_params.semid.embedder=all-minilm-l6-v2"])
    log = Rehearsal(tmp_path, quiet=True)
    inputs = rehearsal_inputs(RehearsalPlan(real, tmp_path / "out"), _Prepared(), log)
    cfg = AutoConfig.from_pretrained(inputs["base"], local_files_only=True)
    # the folder's own architecture and choices, at toy depth and width
    assert cfg.model_type == "qwen3" and cfg.tie_word_embeddings is True and cfg.rms_norm_eps == 1e-5
    assert cfg.rope_parameters["rope_theta"] == 12345.0
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (2, 64, 4)
    model = AutoModelForCausalLM.from_pretrained(inputs["base"], local_files_only=True)
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    said = dict(log.substitutions)
    assert f"{folder / 'config.json'}" in said["base.model"] and "random weights" in said["base.model"]
    assert said["tokenizer"].startswith("trained here")
    # the absent Qwen3 embedding folder: its architecture (a Qwen3 decoder read at the last token), random weights
    emb_dir = Path(inputs["embedder:text"])
    assert AutoConfig.from_pretrained(emb_dir, local_files_only=True).model_type == "qwen3"
    assert json.loads((emb_dir / "1_Pooling" / "config.json").read_text())["pooling_mode_lasttoken"] is True
    assert isinstance(AutoModel.from_pretrained(emb_dir, local_files_only=True), object)
    vecs = load_embedder(str(emb_dir)).encode(["a red cable", "a blue case"])
    assert vecs.shape == (2, 64)
    assert [float(v) for v in (vecs ** 2).sum(axis=1)] == pytest.approx([1.0, 1.0], rel=1e-5)  # normalised
    # the offline default is the real one
    assert said["embedder all-minilm-l6-v2"].startswith("real")


def test_no_domains_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--rehearse-domains 0"):
        rehearse(load_grid("amazon2023"), str(tmp_path / "r"), domains=0)
    assert not (tmp_path / "r").exists()


def test_a_model_folder_with_its_tokenizer_keeps_the_real_tokenizer_and_vocabulary_rows(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer, Qwen3Config

    from mmgrid.models.tokenizer import train_tokenizer

    folder = tmp_path / "qwen3-with-tokenizer"
    Qwen3Config(vocab_size=777, hidden_size=256, num_hidden_layers=6).save_pretrained(folder)
    train_tokenizer(_Prepared.item_texts, 300).save_pretrained(folder)
    real = load_grid("amazon2023", [f"base.model={folder}", "paradigms=[sasrec, emb]"])
    log = Rehearsal(tmp_path, quiet=True)
    inputs = rehearsal_inputs(RehearsalPlan(real, tmp_path / "out"), _Prepared(), log)
    said = dict(log.substitutions)
    assert said["tokenizer"].startswith(f"real: {folder}")
    tok = AutoTokenizer.from_pretrained(inputs["base"], local_files_only=True)
    assert tok.get_vocab() == AutoTokenizer.from_pretrained(folder, local_files_only=True).get_vocab()
    cfg = AutoConfig.from_pretrained(inputs["base"], local_files_only=True)
    assert cfg.vocab_size == 777 and cfg.num_hidden_layers == 2  # the folder's padded rows, toy depth


def test_toy_grid_of_the_demo_keeps_its_regularizer_rows_and_makes_periodic_ones_fire(tmp_path: Path) -> None:
    real = load_grid("demo")
    log = Rehearsal(tmp_path, quiet=True)
    toy = toy_grid(RehearsalPlan(real, tmp_path), ["A", "B", "C"], {"base": real.base.model}, log)
    assert [(v.name, v.regularizer, v.paradigms) for v in toy.variants] == \
        [(v.name, v.regularizer, v.paradigms) for v in real.variants]
    soup = next(v for v in toy.variants if v.regularizer == "soup_to_go")
    assert soup.params == {"every": 2}  # 50 steps would never come in a 6-step toy stage
    orbit = next(v for v in toy.variants if v.regularizer == "orbit")
    assert orbit.params == next(v for v in real.variants if v.regularizer == "orbit").params
    assert toy.base.model == "tiny_qwen3()" and toy.train.seeds == real.train.seed_list[:2]
    assert toy.train.dtype == "bfloat16"  # auto picks bfloat16 on the GPU the real grid would run on
    assert "auto -> bfloat16" in dict(log.substitutions)["train.dtype"]
