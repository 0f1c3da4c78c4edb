"""The costed plan of a grid: what ``mmgrid plan`` prints before anything runs.

Every stage the build trains, every merge and evaluation its studies run, each with its
examples, tokens, FLOPs, checkpoint bytes, peak memory and time, and the totals; a stage
whose planned id the registry already holds costs nothing. All of it is an **estimate**:

- FLOPs: ``6 * N * tokens`` for training (forward and backward, Kaplan et al. 2020, "Scaling
  Laws for Neural Language Models", section 2.1), ``2 * N * tokens`` for inference, with N the
  parameter count of the model at that stage (the base plus the semid code rows; HLLM's item
  LLM and two-layer user LLM; SASRec's own sizes) and tokens from the data's counts and the
  paradigm knobs (history length, title and item-text tokens at :data:`CHARS_PER_TOKEN`).
- checkpoint bytes: the stored parameters at 4 bytes (2 for a bf16-trained bf16 base).
- peak memory: 16 bytes a parameter (weights, gradients, AdamW's two moments) plus the
  activations of one batch (Korthikanti et al. 2022, "Reducing Activation Recomputation in
  Large Transformer Models", Eq. 1: ``s b h (34 + 5 a s / h)`` bytes a layer) and its logits.
- time: a :class:`~mmgrid.runtime.throughput.Throughput` (this machine's, measured; or an
  accelerator's at a stated MFU): ``steps * step_seconds + FLOPs / FLOP/s``.

The counts come from the prepared data (:func:`counts_from_prepared`) or, for the paper's
Amazon categories without their files, from MMGRid Table 1 (:func:`counts_from_table1`).
"""

from __future__ import annotations

import copy
import math
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from mmgrid.data.dataset import load_prepared
from mmgrid.data.pipeline import prepare
from mmgrid.data.world_files import AMAZON_TABLE1_TARGETS, write_world
from mmgrid.errors import ConfigError, UnknownNameError
from mmgrid.merge.methods import get_method
from mmgrid.models.base import base_checkpoint_id
from mmgrid.models.builders import parse_builder
from mmgrid.models.tokenizer import train_tokenizer
from mmgrid.paradigms import get_paradigm
from mmgrid.registry.api import Registry
from mmgrid.runtime.modelfiles import ModelShape, model_config, shape_of
from mmgrid.runtime.plan import StagePlan, grid_domains, plan_stages, seeds_all
from mmgrid.runtime.throughput import Throughput

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset

# characters a token of (titles, item text): the tiny base's byte-level BPE is trained on the grid's own item
# text (on the quick demo's world: 7.1 characters a title token, 5.7 an item-text token); about 4 for a
# hub model's English tokenizer (estimates)
CHARS_PER_TOKEN = {"tiny": (7.0, 5.5), "hf": (4.0, 4.0)}
TABLE1_TITLE_CHARS = 80.0  # item titles' length assumed when only Table 1's counts are known
BYTES_PER_STATE = 16  # fp32 weights + gradients + AdamW's two moments, bytes a parameter


@dataclass
class DomainCounts:
    """What a cost estimate needs to know of one domain's data."""

    name: str
    users: int
    items: int
    examples: dict[str, int]  # training examples (interactions) per phase
    test_users: int
    history: dict[str, list[int]] = field(default_factory=dict)  # a sample of history lengths per phase
    title_chars: float = TABLE1_TITLE_CHARS
    text_chars: float = 160.0

    def mean_history(self, phase: str, cap: int) -> float:
        """Mean history length of ``phase``'s examples, each cut to ``cap`` items."""
        h = self.history.get(phase)
        if h:
            return float(np.minimum(np.asarray(h), cap).mean())
        per_user = sum(self.examples.values()) / max(self.users, 1)
        return float(min(cap, per_user / 2))  # Table 1 only: the middle of an average user's sequence


def counts_from_prepared(prepared: PreparedDataset, domains: Iterable[str], sample: int = 4000) -> list[DomainCounts]:
    """Counts of the prepared domains (examples per phase, items, test users, history lengths, text lengths)."""
    stats = {r["domain"]: r for r in prepared.stats().to_dicts()}
    out = []
    for name in domains:
        d, row = prepared.domain(name), stats[name]
        phases = [p for p in prepared.phases if f"n_{p}" in row]
        hist = {}
        for p in phases:
            lens = d.examples(p)["history"].list.len().to_list()
            hist[p] = lens[:: max(1, len(lens) // sample)]
        titles, texts = d.item_titles, d.item_texts
        out.append(DomainCounts(name, int(row["users"]), int(row["items"]),
                                {p: d.examples(p).height for p in phases}, int(row["test_users"]), hist,
                                float(np.mean([len(t) for t in titles])) if titles else TABLE1_TITLE_CHARS,
                                float(np.mean([len(t) for t in texts])) if texts else 160.0))
    return out


def counts_from_table1(domains: Iterable[str], text_chars: float = 256.0) -> list[DomainCounts]:
    """MMGRid Table 1's users, items and interactions per phase ("Statistics of the interaction
    data in Amazon dataset"; ``mmgrid.data.world_files.AMAZON_TABLE1_TARGETS``) for Amazon 2023 category
    names (``Video_Games``) or the paper's (``Video Games``). Test users are Table 1's test interactions
    (an upper bound: one example a user).

    Raises:
        ConfigError: a domain Table 1 does not have.
    """
    by_name = {t.paper_name: t for t in AMAZON_TABLE1_TARGETS}
    out = []
    for name in domains:
        t = by_name.get(name.replace("_", " "))
        if t is None:
            raise ConfigError(f"data.domains: {name!r} is not one of MMGRid Table 1's domains "
                              f"({', '.join(by_name)}); prepare the data (`mmgrid prepare`) to plan from its counts.")
        pre, p1, p2, test = t.interactions
        out.append(DomainCounts(name, t.users, t.items, {"pretrain": pre, "p1": p1, "p2": p2, "test": test},
                                min(t.users, test), {}, TABLE1_TITLE_CHARS, text_chars))
    return out


@dataclass
class CostRow:
    """One line of the plan: a group of like jobs (``count`` of them) and their summed costs."""

    kind: str  # base | stage | merge | eval
    what: str
    count: int
    examples: int
    tokens: float
    flops: float
    ckpt_bytes: float
    peak_bytes: float  # the largest job's
    seconds: float
    held: int = 0  # of ``count``, already in the registry (cost nothing)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # one entry a job (id, coords, seconds), stages only

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CostPlan:
    """The rows of a grid's plan, what the counts and the throughput came from, and the totals."""

    grid: str
    rows: list[CostRow]
    data_source: str
    model_source: str
    throughput: Throughput

    def totals(self, pending_only: bool = False) -> dict[str, float]:
        """Sums over the rows (``pending_only``: what is not in the registry yet)."""
        out = {"jobs": 0.0, "examples": 0.0, "tokens": 0.0, "flops": 0.0, "ckpt_bytes": 0.0, "seconds": 0.0,
               "peak_bytes": 0.0}
        for r in self.rows:
            share = (r.count - r.held) / r.count if pending_only and r.count else 1.0
            out["jobs"] += r.count * share
            for k in ("examples", "tokens", "flops", "ckpt_bytes", "seconds"):
                out[k] += getattr(r, k) * share
            out["peak_bytes"] = max(out["peak_bytes"], r.peak_bytes)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"grid": self.grid, "estimates": True, "data_source": self.data_source,
                "model_source": self.model_source, "throughput": asdict(self.throughput),
                "rows": [r.to_dict() for r in self.rows], "totals": self.totals(),
                "to_run": self.totals(pending_only=True)}


# ----------------------------------------------------------------------------- models


@dataclass(frozen=True)
class StageModel:
    """One paradigm's model at a stage: parameters trained (N), parameters stored, the FLOPs of one
    training example and its tokens, and the longest sequence of a batch."""

    n: int
    stored: int
    flops_per_example: float
    tokens_per_example: float
    seq: int
    logits: int  # output rows a token (vocabulary or catalog)


def _knobs(cfg: GridConfig, paradigm: str) -> Any:
    """The paradigm's resolved knobs (its declared defaults with the grid's values)."""
    par = get_paradigm(paradigm)
    defaults = getattr(par, "defaults", None) or {}
    return _Obj({**dict(defaults), **dict(cfg.paradigm_params.get(paradigm) or {})})


class _Obj(dict):
    def __getattr__(self, name: str) -> Any:
        return self[name]


def stage_model(cfg: GridConfig, shape: ModelShape, paradigm: str, dom: DomainCounts, phase: str,
                chars_per_token: tuple[float, float]) -> StageModel:
    """The :class:`StageModel` of ``paradigm`` on ``dom``'s ``phase`` (see the module docstring)."""
    p = _knobs(cfg, paradigm)
    b = cfg.train.batch_size
    if paradigm == "sasrec":
        h, layers, L = int(p.hidden), int(p.layers), int(p.max_len)
        n_layers = layers * (4 * h * h + 4 * h + 2 * h * h + 2 * h + 4 * h)
        n = (dom.items + 1) * h + L * h + n_layers + 2 * h
        hist = dom.mean_history(phase, L)
        # the layers per position, and the full-catalog scores (items x hidden) of each position
        return StageModel(n, n, 6.0 * (n_layers + dom.items * h) * hist, hist, L, dom.items)
    if paradigm == "emb":
        t_item = min(int(p.max_item_tokens), math.ceil(dom.text_chars / chars_per_token[1]) + 1)
        hist = dom.mean_history(phase, int(p.max_history))
        n_item = shape.params(lm_head=False)
        n_user = 2 * shape.layer_params() + shape.hidden
        neg = dom.items if int(p.n_negatives) < 0 else min(dom.items, int(p.n_negatives))
        items_a_step = min(dom.items, b * (hist + 1) + neg)  # unique items encoded per step
        item_tokens = items_a_step * t_item / b  # per example
        flops = 6.0 * (shape.flop_params(lm_head=False) * item_tokens + 2 * shape.layer_params() * (hist + 1))
        return StageModel(n_item + n_user, n_item + n_user, flops, item_tokens + hist + 1, t_item, 0)
    t_title = min(int(p.get("max_title_tokens", 16)), math.ceil(dom.title_chars / chars_per_token[0]))
    if paradigm == "semid":
        levels, size = int(p.levels), int(p.codebook_size)
        n = shape.params(extra_vocab=levels * size)
        hist = dom.mean_history(phase, int(p.max_history))
        tokens = 8 + (hist + 1) * levels
        seq = 8 + (int(p.max_history) + 1) * levels
        return StageModel(n, n, 6.0 * shape.flop_params(extra_vocab=levels * size) * tokens, tokens, seq,
                          shape.vocab + levels * size)
    # text (BIGRec) and any other LM paradigm: titles of the history, then the target title
    n = shape.params()
    hist = dom.mean_history(phase, int(p.get("max_history", 10)))
    tokens = 8 + hist * (t_title + 1) + t_title + 1
    seq = 4 + int(p.get("max_history", 10)) * (int(p.get("max_title_tokens", 16)) + 2) + \
        int(p.get("max_title_tokens", 16)) + 4
    return StageModel(n, n, 6.0 * shape.flop_params() * tokens, tokens, seq, shape.vocab)


def peak_bytes(model: StageModel, shape: ModelShape, batch: int) -> float:
    """Training memory of one stage: optimizer state plus one batch's activations and logits."""
    act = shape.layers * model.seq * batch * shape.hidden * (34 + 5 * shape.heads * model.seq / shape.hidden)
    logits = 2 * 4.0 * batch * model.seq * model.logits  # fp32 logits and their gradient
    return BYTES_PER_STATE * model.n + act + logits


def eval_tokens(cfg: GridConfig, paradigm: str, dom: DomainCounts, model: StageModel) -> tuple[float, float]:
    """(tokens, FLOPs) of evaluating one checkpoint on ``dom``'s test users (``eval.max_users``)."""
    p = _knobs(cfg, paradigm)
    users = min(dom.test_users, cfg.eval.max_users or dom.test_users)
    if paradigm == "emb":
        tokens = dom.items * model.seq + users * (dom.mean_history("test", int(p.max_history)) + 1)
    elif paradigm == "sasrec":
        tokens = users * model.tokens_per_example
    else:
        beams = max(int(p.get("num_beams", 4)), max(cfg.eval.ks) + 10) if paradigm == "semid" else \
            int(p.get("num_beams", 4))
        new = int(p.levels) if paradigm == "semid" else int(p.get("max_title_tokens", 16)) + 1
        tokens = users * (model.tokens_per_example + beams * new)
    return tokens, 2.0 * model.flops_per_example / (6.0 * max(model.tokens_per_example, 1e-9)) * tokens


# ----------------------------------------------------------------------------- the plan


@dataclass
class PlanInputs:
    """What :func:`cost_plan` works from: the grid, the domains' counts, the base's shape, the
    throughput, the registry's held ids and the planned stages (with ids) when known."""

    cfg: GridConfig
    counts: list[DomainCounts]
    shape: ModelShape
    throughput: Throughput
    data_source: str
    model_source: str
    stages: list[Any] | None = None  # mmgrid.runtime.plan.StagePlan, when the ids could be planned
    held: set[str] = field(default_factory=set)
    lm_docs: int = 0


def planned_stages(cfg: GridConfig, domains: list[str]) -> list[Any]:
    """The stages the build trains, without ids (the same loops as ``runtime.plan.plan_stages``)."""
    seeds, shared, out = cfg.train.seed_list, set(cfg.train.shared_stages or []), []
    for seed in seeds:
        for v in cfg.variants:
            if seed != seeds[0] and not seeds_all(v):
                continue
            for par in v.paradigms or cfg.paradigms:
                for dom in domains:
                    for i, stage in enumerate(cfg.train.stages):
                        if seed != seeds[0] and stage in shared:
                            continue
                        out.append(StagePlan(v.name, par, dom, stage, "", "", i == 0, seed))
    return out


def cost_plan(inp: PlanInputs) -> CostPlan:
    """The costed plan (see the module docstring)."""
    cfg, shape, tp = inp.cfg, inp.shape, inp.throughput
    tiny = parse_builder(cfg.base.model) is not None
    cpt = CHARS_PER_TOKEN["tiny" if tiny else "hf"]
    store = 2 if (not tiny and cfg.train.dtype == "bfloat16") else 4
    doms = {d.name: d for d in inp.counts}
    rows: list[CostRow] = []
    if tiny:  # the tiny base is trained here as a language model
        n = shape.params()
        docs = inp.lm_docs or int(getattr(cfg.data, "lm_text_docs", 0) or 0)
        tokens = cfg.base.lm_epochs * docs * min(cfg.base.max_length, 0.8 * cfg.base.max_length)
        steps = cfg.base.lm_epochs * math.ceil(docs / cfg.base.lm_batch_size)
        flops = 6.0 * n * tokens
        flops = 6.0 * shape.flop_params() * tokens
        rows.append(CostRow("base", f"base {cfg.base.model} (LM on {docs} texts)", 1, docs, tokens, flops,
                            n * 4.0, BYTES_PER_STATE * n, tp.seconds(flops, steps)))
    else:
        rows.append(CostRow("base", f"base {cfg.base.model} (imported, not trained)", 1, 0, 0, 0,
                            shape.params() * store, shape.params() * store, 0.0))
    stages = inp.stages if inp.stages is not None else planned_stages(cfg, list(doms))
    groups: dict[tuple[str, str, str], CostRow] = {}
    for s in stages:
        dom = doms[s.domain]
        m = stage_model(cfg, shape, s.paradigm, dom, s.stage, cpt)
        n_ex = dom.examples.get(s.stage, 0)
        n_ex = min(n_ex, cfg.train.max_examples) if cfg.train.max_examples else n_ex
        epochs = cfg.train.epochs[s.stage]
        steps = epochs * math.ceil(n_ex / cfg.train.batch_size)
        flops = epochs * n_ex * m.flops_per_example
        secs = tp.seconds(flops, steps)
        held = bool(s.id) and s.id in inp.held
        key = (s.paradigm, s.stage, s.variant)
        row = groups.get(key)
        if row is None:
            row = groups[key] = CostRow("stage", f"{s.paradigm} {s.stage}" + ("" if s.variant == "default" else
                                                                              f" [{s.variant}]"),
                                        0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
        row.count += 1
        row.held += int(held)
        row.examples += epochs * n_ex
        row.tokens += epochs * n_ex * m.tokens_per_example
        row.flops += flops
        row.ckpt_bytes += m.stored * store
        row.peak_bytes = max(row.peak_bytes, peak_bytes(m, shape, cfg.train.batch_size))
        row.seconds += secs
        row.jobs.append({"id": s.id, "variant": s.variant, "paradigm": s.paradigm, "domain": s.domain,
                         "stage": s.stage, "seed": s.seed, "examples": epochs * n_ex, "flops": flops,
                         "seconds": 0.0 if held else secs, "estimate_seconds": secs, "held": held})
    for row in groups.values():  # a held stage costs nothing
        row.seconds = sum(j["seconds"] for j in row.jobs)
    rows += list(groups.values())
    rows += _study_rows(cfg, shape, doms, cpt, store, tp)
    return CostPlan(cfg.name, rows, inp.data_source, inp.model_source, tp)


def _eval_row(cfg: GridConfig, what: str, kind: str, evals: list[tuple[str, DomainCounts, StageModel]],
              tp: Throughput, merges: int = 0, stored: float = 0.0) -> CostRow:
    tokens = flops = 0.0
    users = 0
    for par, dom, m in evals:
        t, f = eval_tokens(cfg, par, dom, m)
        tokens, flops = tokens + t, flops + f
        users += min(dom.test_users, cfg.eval.max_users or dom.test_users)
    n = max((m.n for _, _, m in evals), default=0)
    merge_flops = 4.0 * n * merges  # an elementwise merge: a few operations a parameter
    flops += merge_flops
    batches = math.ceil(users / 64)
    return CostRow(kind, what, len(evals) + merges, users, tokens, flops, stored, 4.0 * n * 3,
                   tp.seconds(flops, batches))


def _study_rows(cfg: GridConfig, shape: ModelShape, doms: dict[str, DomainCounts], cpt: tuple[float, float], store: int,
                tp: Throughput) -> list[CostRow]:
    """The evaluations of the built grid, the temporal sweep and the cross-domain sweep."""
    rows = []
    last = cfg.train.stages[-1]
    ev = [(par, d, stage_model(cfg, shape, par, d, last, cpt)) for v in cfg.variants
          for par in (v.paradigms or cfg.paradigms) for d in doms.values()
          for _ in (cfg.train.seed_list if v.regularizer == "none" else cfg.train.seed_list[:1])]
    rows.append(_eval_row(cfg, f"evaluate {last} checkpoints (Table 2)", "eval", ev, tp))
    t = cfg.sweeps.temporal
    if t.paradigm in cfg.paradigms:
        points = int(math.floor((t.stop - t.start) / t.step + 1e-9)) + 1
        tdoms = [doms[d] for d in (t.domains or list(doms)) if d in doms]
        ev = [(t.paradigm, d, stage_model(cfg, shape, t.paradigm, d, last, cpt)) for d in tdoms for _ in range(points)]
        m = ev[0][2] if ev else None
        row = _eval_row(cfg, f"temporal sweep: {t.paradigm}, {points} lambdas x {len(tdoms)} domains (Eq. 10)",
                        "merge", ev, tp, merges=len(ev), stored=(m.stored * store * len(tdoms)) if m else 0.0)
        rows.append(row)
    cd = cfg.sweeps.cross_domain
    pairs = cd.pairs or [list(p) for p in combinations(list(doms), 2)]
    per_pair = sum(len(cd.bases) if _needs_base(mname) else 1 for mname in cd.methods) * max(len(cd.alphas), 1)
    for par in cd.paradigms:
        if par not in cfg.paradigms or not pairs:
            continue
        ev, merges = [], 0
        for a, b in pairs:
            for _ in range(per_pair):
                merges += 1
                ev += [(par, doms[x], stage_model(cfg, shape, par, doms[x], last, cpt)) for x in (a, b) if x in doms]
        m = ev[0][2] if ev else None
        stored = (m.stored * store * len(pairs)) if (m and "neutral" in cd.bases) else 0.0
        rows.append(_eval_row(cfg, f"cross-domain sweep: {par}, {len(pairs)} pairs x {per_pair} merges "
                                   "(Eq. 7-8; at most)", "merge", ev, tp, merges=merges, stored=stored))
    return rows


def _needs_base(method: str) -> bool:
    try:
        return bool(get_method(method).needs_base)
    except UnknownNameError:  # the validation pass names it
        return True


def base_shape(cfg: GridConfig) -> tuple[ModelShape, str]:
    """The base's :class:`ModelShape` and where its config came from.

    Raises:
        ConfigError: no config for ``base.model`` (not a builder, folder, cached or known hub model).
    """
    config, where = model_config(cfg.base.model, cfg.base.vocab_size if parse_builder(cfg.base.model) else None)
    if config is None:
        raise ConfigError(f"base.model: cannot size {cfg.base.model!r} ({where}); give a local folder with its "
                          "config.json or download the model first (`hf download <id>`).")
    return shape_of(config), where


# ----------------------------------------------------------------------------- gathering the inputs


def grid_counts(cfg: GridConfig) -> tuple[list[DomainCounts], str, Any, int | None]:
    """The domains' counts and where they came from, the prepared dataset (None when there is none)
    and a tiny base's vocabulary size (:func:`tiny_vocabulary`; None for another base or no item text):
    the prepared data; for a grid with a synthetic ``world:``, that world written and prepared in a
    temporary folder (it is deterministic, seconds); else MMGRid Table 1's counts for the paper's
    Amazon 2023 categories.

    Raises:
        ConfigError: no prepared data and no way to count (name what to run).
    """
    if (Path(cfg.prepared_dir) / "manifest.json").is_file():
        prepared = load_prepared(cfg.prepared_dir)
        vocab = tiny_vocabulary(cfg, prepared) if parse_builder(cfg.base.model) else None
        return (counts_from_prepared(prepared, grid_domains(cfg, prepared)), f"prepared data {cfg.prepared}",
                prepared, vocab)
    if cfg.world is not None:
        tmp = Path(tempfile.mkdtemp(prefix="mmgrid-plan-"))
        try:
            c = copy.deepcopy(cfg)
            c.data.root, c.prepared = str(tmp / "world"), str(tmp / "prepared")
            assert c.world is not None  # a copy of cfg, whose world is set
            write_world(c.data.root, c.world)
            prepared = prepare(c, log=lambda *_a, **_k: None)
            counts = counts_from_prepared(prepared, grid_domains(c, prepared))
            vocab = tiny_vocabulary(cfg, prepared) if parse_builder(cfg.base.model) else None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return counts, f"the grid's synthetic world (seed {cfg.world.seed}), prepared in a temporary folder", None, vocab
    if cfg.data.source == "amazon2023" and cfg.data.domains:
        text = float(getattr(cfg.data.item_text, "max_chars", 256) or 256)
        return (counts_from_table1(cfg.data.domains, text),
                "MMGRid Table 1's counts (the raw files are not prepared here)", None, None)
    raise ConfigError(f"mmgrid plan: {cfg.prepared} is not prepared and grid {cfg.name!r} has neither a world: "
                      "section nor the paper's domains; run `mmgrid prepare` first.")


def tiny_vocabulary(cfg: GridConfig, prepared: PreparedDataset) -> int:
    """The vocabulary a tiny base of ``cfg`` will have: its byte-level BPE trained on every domain's
    item text, capped by ``base.vocab_size`` (as :mod:`mmgrid.train.base_lm` trains it; about a second)."""
    texts = [t for d in prepared.domains for t in prepared.domain(d).item_texts]
    return len(train_tokenizer(texts, cfg.base.vocab_size))


def plan_inputs(cfg: GridConfig, throughput: Throughput) -> PlanInputs:
    """Everything :func:`cost_plan` needs: the counts, the base's shape (the stored base's vocabulary
    where it is built), and, when the data is prepared and the registry exists, the planned ids and
    which of them the registry holds."""
    counts, source, prepared, vocab = grid_counts(cfg)
    shape, where = base_shape(cfg)
    inp = PlanInputs(cfg, counts, shape, throughput, source, where)
    if prepared is not None:
        inp.lm_docs = len(prepared.lm_text("train"))
    if vocab is not None:  # a tiny base's vocabulary is what its tokenizer learns from the items
        config, _ = model_config(cfg.base.model, vocab)
        inp.shape = shape_of(config)  # type: ignore[arg-type]
        inp.model_source = f"{where}, vocabulary {vocab} (its tokenizer trained on the items, as the build does)"
    if prepared is None or not (Path(cfg.registry_root) / "manifests").is_dir():
        return inp
    reg = Registry.open(cfg.registry_root, read_only=True)
    bid = base_checkpoint_id(cfg.base, reg, prepared.fingerprint, cfg.train.seed)
    stages = plan_stages(cfg, reg, bid, grid_domains(cfg, prepared), prepared.fingerprint)
    inp.stages = stages
    inp.held = {s.id for s in stages if reg.has(s.id)}
    if reg.has(bid):
        inp.held.add(bid)
        vocab = (reg.get(bid).meta or {}).get("vocab_size")
        if vocab and parse_builder(cfg.base.model):
            config, _ = model_config(cfg.base.model, int(vocab))
            inp.shape = shape_of(config)  # type: ignore[arg-type]
            inp.model_source = f"{where}, vocabulary {vocab} as stored"
    return inp


# ----------------------------------------------------------------------------- printing


def _si(x: float, unit: str = "") -> str:
    for factor, p in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g}{p}{unit}"
    return f"{x:.3g}{unit}"


def _bytes(x: float) -> str:
    for factor, p in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= factor:
            return f"{x / factor:.3g} {p}"
    return f"{x:.0f} B"


def _time(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.3g} h"
    if s >= 60:
        return f"{s / 60:.3g} min"
    return f"{s:.3g} s"


def render(plan: CostPlan) -> str:
    """The plan as a text table (``mmgrid plan``)."""
    head = ("what", "jobs", "held", "examples", "tokens", "FLOPs (est.)", "checkpoints", "peak mem", "time (est.)")
    lines = [[r.what, str(r.count), str(r.held), _si(r.examples), _si(r.tokens), _si(r.flops),
              _bytes(r.ckpt_bytes), _bytes(r.peak_bytes), _time(r.seconds)] for r in plan.rows]
    for label, t in (("total", plan.totals()), ("to run (not held)", plan.totals(pending_only=True))):
        lines.append([label, f"{t['jobs']:.0f}", "", _si(t["examples"]), _si(t["tokens"]), _si(t["flops"]),
                      _bytes(t["ckpt_bytes"]), _bytes(t["peak_bytes"]), _time(t["seconds"])])
    widths = [max(len(x[i]) for x in [list(head), *lines]) for i in range(len(head))]
    fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    rule = "-" * len(fmt(list(head)))
    out = [f"plan of grid {plan.grid!r} (every number an estimate)",
           f"  data: {plan.data_source}", f"  base: {plan.model_source}", f"  time: {plan.throughput.source}",
           "  FLOPs: 6 x N x tokens to train, 2 x N x tokens to evaluate (N: the model's parameters at that job)",
           "", fmt(list(head)), rule]
    out += [fmt(x) for x in lines[:-2]] + [rule] + [fmt(x) for x in lines[-2:]]
    return "\n".join(out)
