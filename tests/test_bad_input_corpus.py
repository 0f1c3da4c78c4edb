"""The bad-input corpus: one table of bad inputs across data, config, registry,
merge and the command line, one id per case.

Each case builds its bad input under ``tmp_path`` and runs the public API (or the ``mmgrid``
command, in-process through :func:`mmgrid.cli.main`, and twice as ``python -m mmgrid`` in a
subprocess). Every case asserts

* the error: its type (a subclass of :class:`mmgrid.errors.MmgridError`), or for the command
  line exit status 2 with a one-line ``mmgrid: error:`` message and no traceback;
* its message names *where* (the key path, file, tensor or argument), *what* (the offending
  value or thing), and *how to fix it* (a concrete word of the fix);
* nothing was written: the names and sizes of every file under ``tmp_path`` are the same
  before and after (SQLite's own ``-wal``/``-shm``/``-journal`` side files excepted).

The counts (cases, named errors, wrote nothing) are printed at the end of the module. Storage,
derived state and concurrency (read-only, full or damaged registries, an index that disagrees
with its files, gc racing writers) have their own table: ``tests/test_storage_corpus.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from safetensors.torch import save_file

from mmgrid.errors import ConfigError, DataError, MergeError, MmgridError, RegistryError, UnknownNameError

sys.path.insert(0, str(Path(__file__).parent / "data"))  # the data tests' builders (no package there)
import test_data_bad_input as data_bad  # noqa: E402
from data_fixtures import HAND_META, HAND_REVIEWS, grid_yaml, write_category  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLI = "exit status 2"  # the expected "error" of a command-line case


@dataclass(frozen=True)
class Case:
    area: str  # data | config | registry | merge | cli
    setup: Callable[[Path], Callable[[], Any]]  # builds the bad input under tmp; returns the action
    error: Any  # an MmgridError subclass, or CLI
    where: str  # regexes the message must match; "{tmp}" stands for tmp_path
    what: str
    fix: str  # searched case-insensitively


CASES: dict[str, Case] = {}


def case(cid: str, area: str, setup: Callable[[Path], Callable[[], Any]], error: Any, where: str, what: str,
         fix: str) -> None:
    assert cid not in CASES, cid
    CASES[cid] = Case(area, setup, error, where, what, fix)


# ----------------------------------------------------------------------------- config
def _grid(*overrides: str, text: str | None = None) -> Callable[[Path], Callable[[], Any]]:
    """The one validation pass (load_grid + validate_grid) of the demo grid or of ``text``."""

    def setup(tmp: Path) -> Callable[[], Any]:
        src: Any = "demo"
        if text is not None:
            src = tmp / "grid.yaml"
            src.write_text(text)

        def run() -> Any:
            from mmgrid.config import load_grid
            from mmgrid.validate import validate_grid

            return validate_grid(load_grid(src, list(overrides)))

        return run

    return setup


RANGE_FIX = "Fix the value in the grid YAML"
CONFIG_CASES = [
    # id, override, where, what, fix
    ("batch_size 0", "train.batch_size=0", r"train\.batch_size", r": 0 is out of range", r"accepted: in \[1, "),
    ("batch_size negative", "train.batch_size=-3", r"train\.batch_size", r"-3 is out of range", r"accepted: in \[1, "),
    ("lr nan", "train.lr=.nan", r"train\.lr", r"nan is not a finite number", "give a finite value"),
    ("lr zero", "train.lr=0", r"train\.lr", r"0\.0 is out of range", "accepted: > 0"),
    ("lr negative", "train.lr=-1e-3", r"train\.lr", r"-0\.001 is out of range", "accepted: > 0"),
    ("lr inf", "train.lr=.inf", r"train\.lr", r"inf is not a finite number", "give a finite value"),
    ("lr a word", "train.lr=fast", r"train\.lr", r"expected a number.*'fast'", "such as 0.5 or 1e-4"),
    ("epochs negative", "train.epochs.p1=-2", r"train\.epochs\.p1", r"-2 is out of range", r"accepted: in \[0, "),
    ("epochs fractional", "train.epochs.p1=2.5", r"train\.epochs\.p1", r"expected an integer.*2\.5",
     "a whole number"),
    ("max_examples negative", "train.max_examples=-5", r"train\.max_examples", r"-5 is out of range",
     r"accepted: in \[1, "),
    ("max_examples zero", "train.max_examples=0", r"train\.max_examples", r"0 is out of range", r"accepted: in \[1, "),
    ("weight_decay negative", "train.weight_decay=-0.1", r"train\.weight_decay", r"-0\.1 is out of range",
     "accepted: >= 0"),
    ("weight_decay nan", "train.weight_decay=.nan", r"train\.weight_decay", "nan is not a finite", "finite value"),
    ("threads zero", "train.threads=0", r"train\.threads", r"0 is out of range", r"accepted: in \[1, "),
    ("seed negative", "train.seed=-1", r"train\.seed", r"-1 is out of range", "accepted: >= 0"),
    ("vocab_size tiny", "base.vocab_size=10", r"base\.vocab_size", r"10 is out of range", r"accepted: in \[260"),
    ("lm_epochs negative", "base.lm_epochs=-1", r"base\.lm_epochs", r"-1 is out of range", r"accepted: in \[0, "),
    ("lm_lr inf", "base.lm_lr=.inf", r"base\.lm_lr", r"inf is not a finite number", "finite value"),
    ("lm_batch_size zero", "base.lm_batch_size=0", r"base\.lm_batch_size", r"0 is out of range", r"accepted: in \[1, "),
    ("max_length zero", "base.max_length=0", r"base\.max_length", r"0 is out of range", r"accepted: in \[2, "),
    ("ks holds 0", "eval.ks=[10, 0]", r"eval\.ks\[1\]", r"0 is out of range", r"accepted: in \[1, "),
    ("ks holds a word", "eval.ks=[ten]", r"eval\.ks\[0\]", r"expected an integer.*'ten'", "a whole number"),
    ("max_users zero", "eval.max_users=0", r"eval\.max_users", r"0 is out of range", r"accepted: in \[1, "),
    ("retention_docs zero", "eval.retention_docs=0", r"eval\.retention_docs", r"0 is out of range",
     r"accepted: in \[1, "),
    ("kcore zero", "data.kcore=0", r"data\.kcore", r"0 is out of range", "accepted: >= 1"),
    ("max_history zero", "data.max_history=0", r"data\.max_history", r"0 is out of range", r"accepted: in \[1, "),
    ("min_history negative", "data.min_history=-1", r"data\.min_history", r"-1 is out of range", "accepted: >= 0"),
    ("heldout share 1", "data.lm_heldout_share=1", r"data\.lm_heldout_share", r"1\.0 is out of range",
     r"accepted: in \[0, 1\)"),
    ("heldout share negative", "data.lm_heldout_share=-0.1", r"data\.lm_heldout_share", r"-0\.1 is out of range",
     r"accepted: in \[0, 1\)"),
    ("lm_text_docs zero", "data.lm_text_docs=0", r"data\.lm_text_docs", r"0 is out of range", r"accepted: in \[1, "),
    ("max_chars zero", "data.item_text.max_chars=0", r"data\.item_text\.max_chars", r"0 is out of range",
     r"accepted: in \[1, "),
    ("temporal step 0", "sweeps.temporal.step=0", r"sweeps\.temporal\.step", r"0\.0 is out of range",
     r"accepted: in \[1e-06, 200\]"),
    ("temporal step negative", "sweeps.temporal.step=-0.05", r"sweeps\.temporal\.step", r"-0\.05 is out of range",
     r"accepted: in \[1e-06, 200\]"),
    ("temporal start after stop", "sweeps.temporal.start=2", r"sweeps\.temporal", r"start 2\.0 is after stop 1\.5",
     "give start <= stop"),
    ("temporal stop nan", "sweeps.temporal.stop=.nan", r"sweeps\.temporal\.stop", "nan is not a finite",
     "finite value"),
    ("alpha nan", "sweeps.cross_domain.alphas=[0.5, .nan]", r"sweeps\.cross_domain\.alphas\[1\]",
     "nan is not a finite", "finite value"),
    ("level 1", "sweeps.predict_lambda.level=1", r"sweeps\.predict_lambda\.level", r"1\.0 is out of range",
     r"accepted: in \(0, 1\)"),
    ("level 0", "sweeps.predict_lambda.level=0", r"sweeps\.predict_lambda\.level", r"0\.0 is out of range",
     r"accepted: in \(0, 1\)"),
    ("world scale 0", "world.scale=0", r"world\.scale", r"0\.0 is out of range", "accepted: in"),
    ("world n_domains 0", "world.n_domains=0", r"world\.n_domains", r"0 is out of range", "accepted: in"),
    ("world seed negative", "world.seed=-1", r"world\.seed", r"-1 is out of range", "accepted: >= 0"),
    ("world ends before start", "world.end=2020-01-01", r"world", r"start 2021-01-01 is not before end 2020-01-01",
     "earlier start"),
    ("world start not a date", "world.start=soon", r"world\.start", r"'soon' is not a date", "YYYY-MM-DD"),
    ("exec num_cpus 0", "exec.num_cpus=0", r"exec\.num_cpus", r"0 is out of range", r"accepted: in \[1, "),
    ("exec gpus negative", "exec.num_gpus_per_train=-1", r"exec\.num_gpus_per_train", r"-1\.0 is negative",
     "use 0 or more"),
    ("override YAML syntax", "train.lr=[", r"override 'train\.lr=\['", r"'\[' is not valid YAML", "quote it"),
    ("override without =", "train.lr", r"override 'train\.lr'", "not of the form key=value", "data.root="),
    ("unknown key", "train.sed=1", r"train", "unknown key 'sed'", "Did you mean 'seed'"),
    ("timestamp unit", "data.timestamp_unit=hours", r"data\.timestamp_unit", "'hours' is not one of", "'ms'"),
    ("stage not a phase", "train.stages=[p3]", r"train\.stages", "'p3' is not a phase", "phases are"),
    ("paradigm unknown", "paradigms=[txt]", "paradigm", "unknown paradigm 'txt'", "Did you mean 'text'"),
    ("cross-domain base unknown", "sweeps.cross_domain.bases=[weird]", r"sweeps\.cross_domain\.bases",
     "unknown base 'weird'", "use original, historical or neutral"),
    ("base model neither", "base.model=not a model", r"base\.model", "'not a model' is neither",
     "owner/name"),
    ("orbit epsilon negative", "variants=[{name: o, regularizer: orbit, params: {epsilon: -1}}]",
     r"variants\[0\]\.params\.epsilon", r"-1\.0 is out of range", "accepted: >= 0"),
    ("orbit epsilon nan", "variants=[{name: o, regularizer: orbit, params: {epsilon: .nan}}]",
     r"variants\[0\]\.params\.epsilon", "nan is not a finite", "finite value"),
    ("soup every 0", "variants=[{name: s, regularizer: soup_to_go, params: {every: 0}}]",
     r"variants\[0\]\.params\.every", r"0 is out of range", "accepted: >= 1"),
    ("l2 lam negative", "variants=[{name: l, regularizer: l2_init, params: {lam: -1}}]",
     r"variants\[0\]\.params\.lam", r"-1\.0 is out of range", "accepted: >= 0"),
    ("regularizer unknown", "variants=[{name: x, regularizer: orbitt}]", "regularizer", "unknown regularizer",
     "Did you mean 'orbit'"),
    ("duplicate variants", "variants=[{name: a}, {name: a}]", "variants", "duplicate variant names",
     "needs its own name"),
    ("merge method param", "sweeps.cross_domain.methods={ties_dare: {density: 2}}",
     r"sweeps\.cross_domain\.methods\.ties_dare", r"density=2\.0 is outside \(0\.0, 1\.0\]", r"e\.g\. density=0\.2"),
]
for _id, _ov, _where, _what, _fix in CONFIG_CASES:
    case(f"config: {_id}", "config", _grid(_ov), ConfigError, _where, _what, _fix)

case("config: grid with a python tag", "config", _grid(text="name: x\ntrain: !!python/object:os.system {}\n"),
     ConfigError, r"grid\.yaml", "not valid YAML", "python/object")
case("config: grid YAML syntax", "config", _grid(text="name: x\ntrain: {lr: [\n"), ConfigError, r"grid\.yaml",
     "not valid YAML", "line")
case("config: grid top level a list", "config", _grid(text="- name\n- x\n"), ConfigError, r"grid\.yaml",
     "top level", "must be a mapping")
case("config: phases out of order", "config",
     _grid(text="name: x\ndata:\n  phases: {a: ['2022-02-01', '2022-03-01'], b: ['2022-01-01', '2022-02-01']}\n"),
     ConfigError, r"data\.phases", "'b' starts before 'a' ends", "listed in time order")

# ----------------------------------------------------------------------------- data
def _data(key: str) -> Callable[[Path], Callable[[], Any]]:
    source, build, extra, _error, _file, _line, _what, _fix = data_bad.BAD_FILES[key]

    def setup(tmp: Path) -> Callable[[], Any]:
        from mmgrid.config import load_grid
        from mmgrid.data.pipeline import prepare

        root = tmp / "root"
        build(root)
        cfg = load_grid(grid_yaml(tmp, {"source": source, "root": str(root), "kcore": 1, **extra}))
        return lambda: prepare(cfg, log=lambda m: None)

    return setup


for _key, (_src, _b, _x, _err, _file, _line, _what, _fix) in data_bad.BAD_FILES.items():
    _where = re.escape(f"{{tmp}}/root/raw/{_file}" if _src == "amazon2023" else _file)
    _where = _where.replace(re.escape("{tmp}"), "{tmp}")
    case(f"data: {_key}", "data", _data(_key), _err, _where + (f", line {_line}:" if _line else ":"), _what, _fix)


# ----------------------------------------------------------------------------- registry
def tiny(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": torch.randn(16, 8, generator=g), "layer.weight": torch.randn(8, 8, generator=g)}


COORDS = {"paradigm": "text", "domain": "Books", "period": "p0"}


class Boom:
    """Unpickling this would run code; it must never get that far."""

    def __reduce__(self):  # noqa: ANN204
        return (Path("/nonexistent-should-never-run").mkdir, ())


def _reg(fn: Callable[[Any, Path], Callable[[], Any]], stored: bool = True) -> Callable[[Path], Callable[[], Any]]:
    """A registry under tmp/reg (holding one checkpoint if ``stored``); ``fn(reg, tmp)`` gives the action."""

    def setup(tmp: Path) -> Callable[[], Any]:
        from mmgrid.registry import Registry

        reg = Registry.open(tmp / "reg")
        if stored:
            reg.put(tiny(0), COORDS, "base", files={"config.json": b"{}"})
        return fn(reg, tmp)

    return setup


def _pickle_file(suffix: str) -> Callable[[Path], Callable[[], Any]]:
    def fn(reg: Any, tmp: Path) -> Callable[[], Any]:
        f = tmp / f"model{suffix}"
        f.write_bytes(pickle.dumps(Boom()))
        return lambda: reg.put(f, {**COORDS, "period": "p1"}, "base")

    return _reg(fn)


for _s in (".bin", ".pt", ".pkl", ".pth", ".ckpt"):
    case(f"registry: put a pickle {_s}", "registry", _pickle_file(_s), RegistryError, re.escape(f"model{_s}"),
         "safetensors", "save_file|safe_serialization")


def _hf_folder(tmp: Path, files: dict[str, Any]) -> Path:
    folder = tmp / "hf"
    folder.mkdir()
    for name, data in files.items():
        p = folder / name
        if isinstance(data, Path):
            p.symlink_to(data)
        else:
            p.write_bytes(data)
    return folder


def _import(files: Callable[[Path], dict[str, Any]]) -> Callable[[Path], Callable[[], Any]]:
    def fn(reg: Any, tmp: Path) -> Callable[[], Any]:
        folder = _hf_folder(tmp, files(tmp))
        return lambda: reg.import_hf(folder, {**COORDS, "period": "p2"})

    return _reg(fn)


def _st_bytes(tmp: Path) -> bytes:
    save_file(tiny(3), str(tmp / "src.safetensors"))
    return (tmp / "src.safetensors").read_bytes()


def _outside(tmp: Path) -> Path:
    (tmp / "secret.txt").write_text("not yours")
    return tmp / "secret.txt"


case("registry: import-hf pickle weights", "registry",
     _import(lambda t: {"pytorch_model.bin": pickle.dumps(Boom()), "config.json": b"{}"}), RegistryError,
     "pytorch_model.bin|hf", "safetensors", "save_pretrained|safe_serialization|save_file")
case("registry: import-hf symlink out of the folder", "registry",
     _import(lambda t: {"model.safetensors": _st_bytes(t), "config.json": b"{}", "tokenizer.json": _outside(t)}),
     RegistryError, "tokenizer.json", "symlink|outside", "copy|inside|real file")
case("registry: import-hf config.json not JSON", "registry",
     _import(lambda t: {"model.safetensors": _st_bytes(t), "config.json": b"{not json"}), RegistryError,
     "config.json", "JSON", "fix|valid|again")


def _alias(name: str) -> Callable[[Path], Callable[[], Any]]:
    def fn(reg: Any, tmp: Path) -> Callable[[], Any]:
        cid = reg.query().iloc[0]["id"]
        return lambda: reg.alias(name, cid)

    return _reg(fn)


for _n in ("../../x", "a/b", "..", "sp ace", ".hidden"):
    case(f"registry: alias {_n!r}", "registry", _alias(_n), RegistryError, "alias", re.escape(repr(_n)),
         "letters|use")


def _put(sd: Callable[[], Any], coords: Any = None, kind: str = "base", **kw: Any) -> Callable[[Path], Callable[[], Any]]:
    return _reg(lambda reg, tmp: lambda: reg.put(sd(), coords if coords is not None else {**COORDS, "period": "p3"},
                                                   kind, **kw))


def _with(name: str, value: float) -> Callable[[], dict[str, torch.Tensor]]:
    def make() -> dict[str, torch.Tensor]:
        sd = tiny(1)
        sd[name][2, 3] = value
        return sd

    return make


case("registry: put a NaN", "registry", _put(_with("layer.weight", float("nan"))), RegistryError,
     "'layer.weight'", "1 NaN and 0 Inf", "nothing was stored")
case("registry: put an Inf", "registry", _put(_with("embed.weight", float("inf"))), RegistryError,
     "'embed.weight'", "0 NaN and 1 Inf", "nothing was stored")
case("registry: put a -Inf", "registry", _put(_with("embed.weight", float("-inf"))), RegistryError,
     "'embed.weight'", "0 NaN and 1 Inf", "nothing was stored")
case("registry: put a list", "registry", _put(lambda: {"w": [1, 2]}), RegistryError, "'w'", "not a tensor",
     "tensor")
case("registry: put nothing", "registry", _put(lambda: {}), RegistryError, "the checkpoint", "no tensors",
     "pass a non-empty state dict")
case("registry: coords domain ../etc", "registry", _put(lambda: tiny(1), {**COORDS, "domain": "../etc"}),
     RegistryError, "domain", r"\.\./etc", "letters|use")
case("registry: coords period a/b", "registry", _put(lambda: tiny(1), {**COORDS, "period": "a/b"}),
     RegistryError, "period", "a/b", "letters|use")
case("registry: coords missing domain", "registry", _put(lambda: tiny(1), {"paradigm": "text", "period": "p0"}),
     RegistryError, "coords", "domain", "give|need|required|must")
case("registry: coords NaN lambda", "registry", _put(lambda: tiny(1), {**COORDS, "lambda": float("nan")}),
     RegistryError, "lambda", "nan", "finite|number")
case("registry: kind unknown", "registry", _put(lambda: tiny(1), kind="finetuned"), RegistryError, "kind",
     "'finetuned'", "base|trained")
case("registry: file name ../", "registry", _put(lambda: tiny(1), files={"../config.json": b"{}"}),
     RegistryError, "file name", r"\.\./config\.json", "plain|name|use")
case("registry: parent unknown", "registry",
     _put(lambda: tiny(1), kind="trained", parents=[("ab" * 8, "previous_stage")]), RegistryError, "parent",
     "ab" * 8, "put the parent|first|query|store")
case("registry: load an unknown id", "registry", _reg(lambda reg, tmp: lambda: reg.load("0123456789abcdef")),
     RegistryError, "0123456789abcdef", "no checkpoint", "query|list|mmgrid")
case("registry: put a missing path", "registry",
     _reg(lambda reg, tmp: lambda: reg.put(tmp / "nope.safetensors", COORDS, "base")), RegistryError,
     "nope.safetensors", "does not exist", "give a .safetensors file")
case("registry: put zero bytes as safetensors", "registry",
     _reg(lambda reg, tmp: (tmp.joinpath("bad.safetensors").write_bytes(b"\0" * 20),
                            lambda: reg.put(tmp / "bad.safetensors", {**COORDS, "period": "p4"}, "base"))[1]),
     RegistryError, "bad.safetensors", "not a valid safetensors", "save_file|again|re")
case("registry: open a file as registry", "registry",
     lambda tmp: (tmp.joinpath("f").write_text("x"), lambda: __import__("mmgrid.registry", fromlist=["x"])
                  .Registry.open(tmp / "f"))[1],
     RegistryError, "f", "is a file", "folder|another")
case("registry: record a non-number result", "registry",
     _reg(lambda reg, tmp: lambda: reg.record_eval(reg.query().iloc[0]["id"], "test", "all", {"r": "high"})),
     RegistryError, "'r'", "number", "number")

# ----------------------------------------------------------------------------- merge


def _merge(make: Callable[[Path], tuple[list[Any], dict[str, Any]]], method: str = "average",
           to_file: bool = False) -> Callable[[Path], Callable[[], Any]]:
    def setup(tmp: Path) -> Callable[[], Any]:
        from mmgrid.merge import merge
        from mmgrid.merge.api import merge_to_file

        models, params = make(tmp)
        if to_file:
            (tmp / "out").mkdir()
            return lambda: merge_to_file(method, models, tmp / "out" / "m.safetensors", **params)
        return lambda: merge(method, models, **params)

    return setup


def _files(**named: Callable[[Path], bytes]) -> Callable[[Path], tuple[list[Any], dict[str, Any]]]:
    def make(tmp: Path) -> tuple[list[Any], dict[str, Any]]:
        out = []
        for name, data in named.items():
            p = tmp / name.replace("_", ".")
            p.write_bytes(data(tmp))
            out.append(p)
        return out, {}

    return make


def _pt(tmp: Path) -> bytes:
    torch.save(tiny(0), tmp / "w.pt")
    return (tmp / "w.pt").read_bytes()


def _state(*sds: dict[str, torch.Tensor], **params: Any) -> Callable[[Path], tuple[list[Any], dict[str, Any]]]:
    return lambda tmp: (list(sds), params)


case("merge: two .pt files", "merge", _merge(_files(x_pt=_pt, y_pt=_pt)), MergeError, r"x\.pt",
     r"not a \.safetensors file \(suffix '\.pt'\)", "save_file")
case("merge: a .pt renamed .safetensors", "merge", _merge(_files(x_safetensors=_pt, y_safetensors=_pt)),
     MergeError, r"x\.safetensors", "header length .* is larger than the file", "save_file")
case("merge: a .pt into a file", "merge", _merge(_files(x_pt=_pt, y_pt=_pt), to_file=True), MergeError,
     r"x\.pt", r"not a \.safetensors file", "save_file")
case("merge: an empty .safetensors", "merge", _merge(_files(x_safetensors=lambda t: b"", y_safetensors=_st_bytes)),
     MergeError, r"x\.safetensors", "not a readable safetensors file", "safetensors")
case("merge: unknown method", "merge", _merge(_state(tiny(0), tiny(1)), method="averge"), UnknownNameError,
     "merge method", "'averge'", "Did you mean 'average'")
case("merge: ties density 2", "merge", _merge(_state(tiny(0), tiny(1), density=2.0), method="ties_dare"),
     MergeError, "density", r"density=2\.0 is outside \(0\.0, 1\.0\]", r"e\.g\. density=0\.2")
case("merge: unknown parameter", "merge", _merge(_state(tiny(0), tiny(1), densty=0.2), method="ties_dare"),
     MergeError, "ties_dare", "unknown key 'densty'", "Did you mean 'density'")
case("merge: shapes differ", "merge",
     _merge(_state(tiny(0), {**tiny(1), "layer.weight": torch.zeros(8, 9)})), MergeError, "layer.weight",
     r"shape", "same|match|architecture")
case("merge: a tensor missing", "merge", _merge(_state(tiny(0), {"embed.weight": tiny(1)["embed.weight"]})),
     MergeError, "layer.weight", "missing|not in", "same|every|architecture")
case("merge: a NaN input", "merge", _merge(_state(tiny(0), _with("layer.weight", float("nan"))()),
                                           to_file=True),
     MergeError, "layer.weight", "NaN|non-finite|not finite", "input|check|fix")
case("merge: a non-existent path", "merge",
     _merge(lambda t: ([t / "gone.safetensors", t / "gone.safetensors"], {})), MergeError, r"gone\.safetensors",
     "no safetensors file", "pass a .safetensors path")


def _recipe(text: str) -> Callable[[Path], Callable[[], Any]]:
    def setup(tmp: Path) -> Callable[[], Any]:
        from mmgrid.merge.recipe import Recipe

        (tmp / "r.yaml").write_text(text)
        return lambda: Recipe.load(tmp / "r.yaml")

    return setup


case("merge: recipe with a python tag", "merge", _recipe("method: !!python/object:os.system {}\ninputs: [a, b]\n"),
     MergeError, r"r\.yaml", "python/object", "without !!python tags")
case("merge: recipe YAML syntax", "merge", _recipe("method: average\ninputs: [a, b\n"), MergeError, r"r\.yaml",
     "not a plain YAML recipe", "plain YAML")
case("merge: recipe unknown key", "merge", _recipe("method: average\ninputs: [a, b]\nwieghts: [1, 2]\n"),
     MergeError, r"r\.yaml", "unknown key 'wieghts'", "Known keys")
case("merge: recipe unknown method", "merge", _recipe("method: tie\ninputs: [a, b]\n"), UnknownNameError,
     "merge method", "'tie'", "known:")

# ----------------------------------------------------------------------------- command line


def _cli(*argv: str, reg: bool = False) -> Callable[[Path], Callable[[], Any]]:
    """``mmgrid ARGV`` in-process ("{tmp}" in an argument stands for tmp_path); the action returns (rc, stderr)."""

    def setup(tmp: Path) -> Callable[[], Any]:
        if reg:  # a registry holding one checkpoint, closed (SQLite folds its log into the file)
            from mmgrid.registry import Registry

            with contextlib.closing(Registry.open(tmp / "reg")) as r:
                r.put(tiny(0), COORDS, "base", files={"config.json": b"{}"})
        args = [a.replace("{tmp}", str(tmp)) for a in argv]

        def run() -> tuple[int, str]:
            from mmgrid.cli import main

            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(args)
            return rc, err.getvalue()

        return run

    return setup


def _subprocess(*argv: str) -> Callable[[Path], Callable[[], Any]]:
    def setup(tmp: Path) -> Callable[[], Any]:
        def run() -> tuple[int, str]:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
            p = subprocess.run([sys.executable, "-m", "mmgrid", *[a.replace("{tmp}", str(tmp)) for a in argv]],
                               cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
            return p.returncode, p.stderr

        return run

    return setup


_OUT = ["registry={tmp}/reg", "prepared={tmp}/prep"]
case("cli: validate batch_size 0", "cli", _cli("validate", "demo", "train.batch_size=0"), CLI,
     r"train\.batch_size", "0 is out of range", r"accepted: in \[1, ")
case("cli: validate lr .nan", "cli", _cli("validate", "demo", "train.lr=.nan"), CLI, r"train\.lr",
     "nan is not a finite", "finite value")
case("cli: validate negative Orbit epsilon", "cli",
     _cli("validate", "demo", "variants=[{name: o, regularizer: orbit, params: {epsilon: -0.5}}]"), CLI,
     r"variants\[0\]\.params\.epsilon", r"-0\.5 is out of range", "accepted: >= 0")
case("cli: build batch_size 0 stores no base", "cli", _cli("build", "demo", "train.batch_size=0", *_OUT), CLI,
     r"train\.batch_size", "0 is out of range", r"accepted: in \[1, ")
case("cli: build epochs p1 -2", "cli", _cli("build", "demo", "train.epochs.p1=-2", *_OUT), CLI,
     r"train\.epochs\.p1", "-2 is out of range", r"accepted: in \[0, ")
case("cli: build max_examples -5", "cli", _cli("build", "demo", "train.max_examples=-5", *_OUT), CLI,
     r"train\.max_examples", "-5 is out of range", r"accepted: in \[1, ")
case("cli: build override YAML syntax", "cli", _cli("build", "demo", "train.lr=[", *_OUT), CLI,
     r"override 'train\.lr=\['", "not valid YAML", "quote it")
case("cli: prepare a missing data root", "cli",
     _cli("prepare", "demo", "data.root={tmp}/nowhere", "--out", "{tmp}/prep"), CLI, "nowhere", "raw|no ",
     "mmgrid world|download")
case("cli: merge recipe with a python tag", "cli",
     lambda tmp: ((tmp / "r.yaml").write_text("method: !!python/object:os.system {}\n"),
                  _cli("merge", "--recipe", "{tmp}/r.yaml", "--registry", "{tmp}/reg", reg=True)(tmp))[1],
     CLI, r"r\.yaml", "python/object", "without !!python tags")
case("cli: merge without inputs", "cli", _cli("merge", "--method", "average", "--registry", "{tmp}/reg", reg=True),
     CLI, "--inputs", "give --method and --inputs", "--recipe")
case("cli: merge unknown input id", "cli",
     _cli("merge", "--method", "average", "--inputs", "feedfacefeedface", "beefbeefbeefbeef", "--registry",
          "{tmp}/reg", reg=True), CLI, "feedfacefeedface", "no checkpoint", "query|list")
case("cli: registry gc negative grace", "cli", _cli("registry", "gc", "{tmp}/reg", "--grace", "-5", reg=True),
     CLI, "grace", "-5", ">= 0")
case("cli: registry show unknown id", "cli", _cli("show", "0123456789abcdef", "--registry", "{tmp}/reg", reg=True),
     CLI, "0123456789abcdef", "no checkpoint", "query|list")
case("cli: registry alias with ../", "cli",
     _cli("registry", "alias", "{tmp}/reg", "../up", "0123456789abcdef", reg=True), CLI, "alias", r"'\.\./up'",
     "letters|use")
case("cli: registry export-hf unknown id", "cli",
     _cli("registry", "export-hf", "{tmp}/reg", "0123456789abcdef", "{tmp}/out", reg=True), CLI,
     "0123456789abcdef", "no checkpoint", "query|list")
case("cli: world --scale 0", "cli", _cli("world", "--out", "{tmp}/w", "--scale", "0"), CLI,
     r"mmgrid world --scale", r"0\.0: out of range \(world\.scale\)", r"accepted: in \(0, 10000\]")
case("cli: world --scale 1e9", "cli", _cli("world", "--out", "{tmp}/w", "--scale", "1e9"), CLI,
     r"mmgrid world --scale", "out of range", r"Give --scale a value")
case("cli: world --scale nan", "cli", _cli("world", "--out", "{tmp}/w", "--scale", "nan"), CLI,
     r"mmgrid world --scale", "nan: out of range", r"accepted: in")
case("cli: world --domains 0", "cli", _cli("world", "--out", "{tmp}/w", "--domains", "0"), CLI,
     r"mmgrid world --domains", r"0: out of range \(world\.n_domains\)", r"accepted: in \[1, 1000\]")
case("cli: world --domains 5000", "cli", _cli("world", "--out", "{tmp}/w", "--domains", "5000"), CLI,
     r"mmgrid world --domains", "5000: out of range", r"Give --domains a value")
case("cli: world --seed -1", "cli", _cli("world", "--out", "{tmp}/w", "--seed", "-1"), CLI,
     r"mmgrid world --seed", r"-1: out of range \(world\.seed\)", "accepted: >= 0")
case("cli: merge --mergekit --max-shard-size nan", "cli",
     lambda tmp: ((tmp / "mk.yml").write_text("merge_method: linear\nmodels: [{model: a}]\n"),
                  _cli("merge", "--mergekit", "{tmp}/mk.yml", "--out", "{tmp}/o", "--max-shard-size", "nan")(tmp))[1],
     CLI, "--max-shard-size", "nan", "positive size in GB")
case("cli: validate semid levels -1", "cli", _cli("validate", "demo", "paradigm_params.semid.levels=-1"), CLI,
     r"paradigm_params\.semid\.levels", "-1 is out of range", "accepted: an integer >= 1")
case("cli: build text num_beams 0", "cli", _cli("build", "demo", "paradigm_params.text.num_beams=0", *_OUT), CLI,
     r"paradigm_params\.text\.num_beams", "0 is out of range", "accepted: an integer >= 1")
case("cli: python -m mmgrid validate batch_size 0", "cli", _subprocess("validate", "demo", "train.batch_size=0"),
     CLI, r"train\.batch_size", "0 is out of range", r"accepted: in \[1, ")
case("cli: python -m mmgrid build lr 1e-4 with epochs -2", "cli",
     _subprocess("build", "demo", "train.lr=1e-4", "train.epochs.p1=-2", *_OUT), CLI, r"train\.epochs\.p1",
     "-2 is out of range", r"accepted: in \[0, ")


# ----------------------------------------------------------------------------- round 3: what a YAML file, a study's
# numbers, a filter and a network target let in (each case fails without its fix)
BOMB = ('a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)))
ROUND3_CONFIG = [
    ("temporal step 1e-9", "sweeps.temporal.step=1e-9", r"sweeps\.temporal\.step", r"1e-09 is out of range",
     r"accepted: in \[1e-06, 200\]"),
    ("temporal grid of 150,001 points", "sweeps.temporal.step=1e-5", r"sweeps\.temporal", r"150,001 lambda points",
     "larger step or a narrower range"),
    ("temporal start -1e300", "sweeps.temporal.start=-1e300", r"sweeps\.temporal\.start", r"-1e\+300 is out of range",
     r"accepted: in \[-100, 100\]"),
    ("temporal stop 1e300", "sweeps.temporal.stop=1e300", r"sweeps\.temporal\.stop", r"1e\+300 is out of range",
     r"accepted: in \[-100, 100\]"),
    ("extend_max 1e300", "sweeps.temporal.extend_max=1e300", r"sweeps\.temporal\.extend_max", r"1e\+300 is out",
     "accepted: in"),
    ("alphas 1e300", "sweeps.cross_domain.alphas=[0.5, 1e300]", r"sweeps\.cross_domain\.alphas\[1\]",
     r"1e\+300 is out of range", "accepted: in"),
    ("replicates 1e8", "sweeps.calibrate.replicates=100000000", r"sweeps\.calibrate\.replicates",
     "100000000 is out of range", r"accepted: in \[1, 10000\]"),
    ("seeds 1001", "train.seeds=" + str(list(range(1001))), r"train\.seeds", "1,001 seeds", "at most 1000"),
    ("predict features empty", "sweeps.predict_lambda.features=[]", r"sweeps\.predict_lambda\.features", "empty",
     "avg_gap_days"),
    ("temporal metric misspelt", "sweeps.temporal.metric=recal@10", r"sweeps\.temporal\.metric", "'recal@10'",
     "Did you mean 'recall@10'"),
    ("cross-domain metric unknown", "sweeps.cross_domain.metric=ndcg@7", r"sweeps\.cross_domain\.metric", "'ndcg@7'",
     "known \\(from eval\\.ks\\)"),
    ("text num_beams 1e6", "paradigm_params.text.num_beams=1000000", r"num_beams", "1000000", "1024"),
    ("override alias bomb", "train.lr={" + BOMB.strip().replace("]\n", "], ") + "}", r"override",
     "expands to more than", "fewer aliases"),
]
for _id, _ov, _where, _what, _fix in ROUND3_CONFIG:
    case(f"config: {_id}", "config", _grid(_ov), ConfigError, _where, _what, _fix)
# every knob that sets an amount of work has an upper bound, checked by the validation pass before any work
WORK_BOUNDS = [
    # id, override, where, what, accepted
    ("text max_new_tokens 1e6", "paradigm_params.text.max_new_tokens=1000000", r"paradigm_params\.text\.max_new_tokens",
     "1000000 is out of range", "<= 4096"),
    ("text max_history 1e6", "paradigm_params.text.max_history=1000000", r"paradigm_params\.text\.max_history",
     "1000000 is out of range", "<= 4096"),
    ("text rank_batch 1e9", "paradigm_params.text.rank_batch=1000000000", r"paradigm_params\.text\.rank_batch",
     "1000000000 is out of range", "<= 1e\\+06"),
    ("text beam_candidates 1e12", "paradigm_params.text.beam_candidates=1000000000000",
     r"paradigm_params\.text\.beam_candidates", "1000000000000 is out of range", "<= 1e\\+08"),
    ("emb max_history 1e6", "paradigm_params.emb.max_history=1000000", r"paradigm_params\.emb\.max_history",
     "1000000 is out of range", "<= 4096"),
    ("emb n_negatives 1e12", "paradigm_params.emb.n_negatives=1000000000000", r"paradigm_params\.emb\.n_negatives",
     "1000000000000 is out of range", "<= 1e\\+08"),
    ("emb user_batch 1e9", "paradigm_params.emb.user_batch=1000000000", r"paradigm_params\.emb\.user_batch",
     "1000000000 is out of range", "<= 1e\\+06"),
    ("emb max_item_tokens 1e6", "paradigm_params.emb.max_item_tokens=1000000", r"paradigm_params\.emb\.max_item_tokens",
     "1000000 is out of range", "<= 4096"),
    ("semid rank_batch 1e9", "paradigm_params.semid.rank_batch=1000000000", r"paradigm_params\.semid\.rank_batch",
     "1000000000 is out of range", "<= 1e\\+06"),
    ("semid codebook_size 1e7", "paradigm_params.semid.codebook_size=10000000", r"paradigm_params\.semid\.codebook_size",
     "10000000 is out of range", "<= 65536"),
    ("semid align_ratio 1e9", "paradigm_params.semid.align_ratio=1000000000.0", r"paradigm_params\.semid\.align_ratio",
     r"1000000000\.0 is out of range", "<= 100"),
    ("sasrec max_len 1e6", "paradigm_params.sasrec.max_len=1000000", r"paradigm_params\.sasrec\.max_len",
     "1000000 is out of range", "<= 4096"),
    ("sasrec layers 1e5", "paradigm_params.sasrec.layers=100000", r"paradigm_params\.sasrec\.layers",
     "100000 is out of range", "<= 1024"),
    ("base lm_epochs 1e6", "base.lm_epochs=1000000", r"base\.lm_epochs", "1000000 is out of range", r"in \[0, 10000\]"),
    ("base lm_batch_size 1e9", "base.lm_batch_size=1000000000", r"base\.lm_batch_size", "1000000000 is out of range",
     r"in \[1, 1e\+06\]"),
    ("base max_length 1e9", "base.max_length=1000000000", r"base\.max_length", "1000000000 is out of range",
     r"in \[2, 131072\]"),
    ("orbit max_merges 1e9", "variants=[{name: o, regularizer: orbit, params: {epsilon: 0.1, max_merges: 1000000000}}]",
     r"variants\[0\]\.params\.max_merges", "1000000000 is out of range", r"in \[1, 1e\+06\]"),
]
case("config: emb temperature 5e-2 read as a string", "config", _grid("paradigm_params.emb.temperature=5e-2"),
     ConfigError, r"paradigm_params\.emb\.temperature", "'5e-2' is read by YAML as a string",
     r"decimal point \(e\.g\. 0\.05\)")
case("config: sasrec max_len 1e3 read as a string", "config",
     _grid(text="name: x\nparadigm_params:\n  sasrec: {max_len: 1e3}\n"), ConfigError,
     r"paradigm_params\.sasrec\.max_len", "'1e3' is read by YAML as a string", r"decimal point \(e\.g\. 1000\.0\)")
for _id, _ov, _where, _what, _acc in WORK_BOUNDS:
    case(f"config: {_id}", "config", _grid(_ov), ConfigError, _where, _what, f"accepted: .*{_acc}.*Fix the value")
case("config: grid alias bomb", "config", _grid(text="name: x\n" + BOMB), ConfigError, r"grid\.yaml",
     "expands to more than 100,000 values", "fewer aliases")
case("config: grid recursive anchor", "config", _grid(text="name: x\nmeta: &m [1, *m]\n"), ConfigError,
     r"grid\.yaml", "recursive anchor", "write the value out")
case("merge: recipe alias bomb", "merge", _recipe("method: average\ninputs: [a, b]\n" + BOMB), ConfigError,
     r"r\.yaml", "expands to more than", "fewer aliases")


def _run_folder(text: str, *argv: str) -> Callable[[Path], Callable[[], Any]]:
    """``mmgrid ARGV`` on a run folder ``{tmp}/run`` whose mmgrid-run.yaml is ``text``."""
    def setup(tmp: Path) -> Callable[[], Any]:
        (tmp / "run").mkdir()
        (tmp / "run" / "mmgrid-run.yaml").write_text(text)
        return _cli(*argv)(tmp)

    return setup


case("cli: run file with a list for its registry", "cli",
     _run_folder("registry: [a, b]\n", "query", "--registry", "{tmp}/run"), CLI, r"mmgrid-run\.yaml",
     r"registry must be a path \(a string\), not \['a', 'b'\]", "write the folder's path")
case("cli: run file alias bomb", "cli", _run_folder(BOMB, "query", "--registry", "{tmp}/run"), CLI,
     r"mmgrid-run\.yaml", "expands to more than", "fewer aliases")
for _stat, _what in (("avg_gap_days=nan", r"avg_gap_days=nan"), ("avg_gap_days=1e308", r"avg_gap_days=1e\+308"),
                     ("avg_gap_days=-5", r"avg_gap_days=-5\.0"), ("p_active=1.5", r"p_active=1\.5")):
    case(f"cli: predict-lambda --stats {_stat}", "cli", _cli("predict-lambda", "demo", "--stats", _stat, *_OUT), CLI,
         r"--stats", _what, r"measured value \(Table 4 of `mmgrid predict-lambda` lists")  # the command that exists
case("cli: sweep continual unknown group", "cli", _cli("sweep", "continual", "demo", "--group", "actve", *_OUT), CLI,
     r"--group", "'actve'", "choose from")


def _calibration_json(text: str) -> Callable[[Path], Callable[[], Any]]:
    def setup(tmp: Path) -> Callable[[], Any]:
        (tmp / "cal").mkdir()
        (tmp / "cal" / "calibration.json").write_text(text)
        return _cli("calibrate", "--plan", "--effect", "0.01", "--from", "{tmp}/cal")(tmp)

    return setup


case("cli: calibrate --plan --from not JSON", "cli", _calibration_json("not json"), CLI, r"calibration\.json",
     "not a readable calibration.json", "give --sd")
case("cli: calibrate --plan --from a JSON list", "cli", _calibration_json("[1, 2]"), CLI, r"calibration\.json",
     "a JSON list", "give --sd")
case("cli: calibrate --plan --from wrong types", "cli", _calibration_json('{"t2_sd": {"user": "x"}}'), CLI,
     r"t2_sd\.user", "'x', not a finite number", "rerun `mmgrid calibrate`")
case("cli: calibrate --plan --from t2_sd a list", "cli", _calibration_json('{"t2_sd": [1]}'), CLI,
     r"t2_sd", "not a mapping", "give --sd")
case("cli: calibrate --plan --effect nan", "cli", _cli("calibrate", "--plan", "--effect", "nan", "--sd", "0.2"), CLI,
     r"--effect", "nan", "finite numbers")


def _mlflow(uri: str, make: Callable[[Path], None] = lambda tmp: None) -> Callable[[Path], Callable[[], Any]]:
    def setup(tmp: Path) -> Callable[[], Any]:
        make(tmp)
        return _cli("export", "mlflow", "--registry", "{tmp}/reg", "--tracking-uri", uri, reg=True)(tmp)

    return setup


case("cli: export mlflow to a sqlite file that is no database", "cli",
     _mlflow("sqlite:///{tmp}/x.db", lambda tmp: (tmp / "x.db").write_text("not a database")), CLI,
     r"x\.db", "is not an SQLite database", "name a new file")
case("cli: export mlflow to an unreachable server", "cli", _mlflow("http://127.0.0.1:9"), CLI,
     r"127\.0\.0\.1:9", "no MLflow server answered.*within 5 s", "start it")


# ----------------------------------------------------------------------------- the test
IGNORED = re.compile(r"(-wal|-shm|-journal)$|__pycache__")


def snapshot(root: Path) -> list[tuple[str, int]]:
    """(relative path, size or -1 for a folder) of everything under ``root``."""
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1)
                  for p in root.rglob("*") if not IGNORED.search(str(p)))


COUNTS = {"cases": 0, "named": 0, "wrote_nothing": 0}


case("cli: predict-lambda --level 0", "cli",
     _cli("predict-lambda", "demo", "--level", "0", *_OUT), CLI,
     r"--level", r"0\.0: out of range \(sweeps\.predict_lambda\.level\)", r"Give --level a value")
case("cli: build text max_new_tokens 1e6 stores nothing", "cli",
     _cli("build", "demo", "paradigm_params.text.max_new_tokens=1000000", *_OUT), CLI,
     r"paradigm_params\.text\.max_new_tokens", "1000000 is out of range", "<= 4096.*Fix the value")
case("cli: compare --resamples 1e9", "cli",
     _cli("compare", "{tmp}/reg", "{tmp}/reg", "--resamples", "1000000000", reg=True), CLI,
     r"--resamples", "1000000000: out of range", r"\[1, 1,000,000\].*Give e\.g\. --resamples 2000")
case("cli: sweep rolling --metric misspelt", "cli", _cli("sweep", "rolling", "demo", "--metric", "recal@10", *_OUT),
     CLI, r"sweep rolling --metric", "'recal@10': not a recorded metric", r"known \(from eval\.ks\): recall@10")
case("cli: query --domain misspelt names the recorded domains", "cli",
     _cli("query", "--registry", "{tmp}/reg", "--domain", "Bookz", reg=True), CLI, r"mmgrid query: --domain",
     "'Bookz' matches no row", r"did you mean 'Books'.*recorded: Books")


def _one_result(*argv: str) -> Callable[[Path], Callable[[], Any]]:
    """``mmgrid ARGV`` on a registry holding one checkpoint with one recorded ndcg@10."""
    def setup(tmp: Path) -> Callable[[], Any]:
        from mmgrid.registry import Registry

        with contextlib.closing(Registry.open(tmp / "reg")) as r:
            cid = r.put(tiny(0), COORDS, "base", files={"config.json": b"{}"})
            r.record_eval(cid, "test", "all", {"ndcg@10": 0.25})
        return _cli(*argv)(tmp)

    return setup


case("cli: results --metric misspelt names the recorded metrics", "cli",
     _one_result("results", "--registry", "{tmp}/reg", "--metric", "ndgc@10"), CLI, r"mmgrid results: --metric",
     "'ndgc@10' matches no row", r"did you mean 'ndcg@10'.*recorded: ndcg@10")
case("cli: results --seed absent names the recorded seeds", "cli",
     _one_result("results", "--registry", "{tmp}/reg", "--seed", "7"), CLI, r"mmgrid results: --seed",
     "7 matches no row", "recorded: .*leave the filter out")
def _prepared_toys(*argv: str) -> Callable[[Path], Callable[[], Any]]:
    """``mmgrid ARGV`` with {tmp}/t.yaml a grid of one prepared domain (Toys) and a registry {tmp}/reg of a base."""
    def setup(tmp: Path) -> Callable[[], Any]:
        from mmgrid.config import load_grid
        from mmgrid.data.pipeline import prepare
        from mmgrid.registry import Registry

        write_category(tmp / "root", "Toys", HAND_REVIEWS, HAND_META)
        path = grid_yaml(tmp, {"root": str(tmp / "root"), "kcore": 1}, registry=str(tmp / "reg"))
        prepare(load_grid(path), log=lambda m: None)
        with contextlib.closing(Registry.open(tmp / "reg")) as r:
            r.put(tiny(0), {**COORDS, "domain": "Toys"}, "base")
        return _cli(*argv)(tmp)

    return setup


case("cli: sweep temporal on a domain the data lacks", "cli",
     _prepared_toys("sweep", "temporal", "{tmp}/t.yaml", "sweeps.temporal.domains=[Toyz]"), CLI,
     r"sweeps\.temporal\.domains", r"\['Toyz'\] are not domains of the prepared data", r"holds \['Toys'\].*name some")
case("cli: build --num-cpus 0", "cli",
     _cli("build", "demo", "--executor", "ray", "--num-cpus", "0", *_OUT), CLI,
     r"--num-cpus", r"0: out of range \(exec\.num_cpus\)", r"Give --num-cpus a value")


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    line = (f"bad-input corpus: {COUNTS['cases']} cases run of {len(CASES)}, {COUNTS['named']} named errors, "
            f"{COUNTS['wrote_nothing']} wrote nothing")
    if tr is not None:  # after pytest's own summary (a line written now would land in the progress dots)
        request.config.add_cleanup(lambda: tr.write_line(line))


def test_the_corpus_covers_every_area() -> None:
    areas = {c.area for c in CASES.values()}
    assert areas == {"data", "config", "registry", "merge", "cli"}
    assert len(CASES) >= 100
    assert all(sum(c.area == a for c in CASES.values()) >= 10 for a in areas)


@pytest.mark.parametrize("cid", [pytest.param(k, id=k, marks=[pytest.mark.slow] if "python -m" in k else [])
                                 for k in CASES])  # fmt: skip
def test_bad_input(tmp_path: Path, cid: str) -> None:
    c = CASES[cid]
    COUNTS["cases"] += 1
    action = c.setup(tmp_path)
    before = snapshot(tmp_path)
    if c.error is CLI:
        rc, msg = action()
        assert rc == 2, msg
        assert "Traceback" not in msg and msg.startswith("mmgrid: error: "), msg
        assert msg.count("\n") == 1, msg  # one line
    else:
        with pytest.raises(MmgridError) as ei:
            action()
        assert isinstance(ei.value, c.error), f"{type(ei.value).__name__}: {ei.value}"
        msg = str(ei.value)
    where = c.where.replace("{tmp}", re.escape(str(tmp_path)))
    assert re.search(where, msg), f"where {where!r} not in: {msg}"
    assert re.search(c.what, msg), f"what {c.what!r} not in: {msg}"
    assert re.search(c.fix, msg, re.I), f"fix {c.fix!r} not in: {msg}"
    COUNTS["named"] += 1
    assert snapshot(tmp_path) == before, "something was written"
    COUNTS["wrote_nothing"] += 1


def test_errors_of_each_area_are_named_classes() -> None:
    """The expected types are named errors (MmgridError subclasses), never bare Python ones."""
    for c in CASES.values():
        if c.error is not CLI:
            assert issubclass(c.error, MmgridError)
            assert issubclass(c.error, (ConfigError, DataError, RegistryError, MergeError))


# knobs whose integer sets no amount of work (a seed, a filter's threshold), so an upper bound would only refuse
UNBOUNDED_OK = {("semid", "quantizer_seed"), ("train.seed", ""), ("world.seed", ""), ("data.kcore", ""),
                ("data.min_history", "")}


def test_every_integer_knob_that_sets_work_has_an_upper_bound() -> None:
    """An integer knob without an upper bound lets a typo set any amount of work: each paradigm knob and
    each ``ranged`` integer of the grid's sections has a finite ``hi``, except the named seeds and filters."""
    import dataclasses
    import typing

    from mmgrid.config import GridConfig
    from mmgrid.paradigms import paradigm_names
    from mmgrid.paradigms.params import RANGES
    from mmgrid.train.regularizers.orbit import OrbitParams

    paradigm_names()  # every paradigm's declaration loaded
    assert {"text", "emb", "semid", "sasrec"} <= set(RANGES)
    open_knobs = [(p, k) for p, table in RANGES.items() for k, (lo, hi, kind) in table.items()
                  if kind == "int" and hi is None and (p, k) not in UNBOUNDED_OK]
    assert open_knobs == []

    def open_fields(cls: type, where: str) -> list[str]:
        out = []
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{where}.{f.name}" if where else f.name
            if dataclasses.is_dataclass(hints[f.name]):
                out += open_fields(hints[f.name], key)
            rng = f.metadata.get("range")
            if rng is not None and "int" in str(hints[f.name]) and rng.hi is None and (key, "") not in UNBOUNDED_OK:
                out.append(key)
        return out

    sections = {k: typing.get_type_hints(GridConfig)[k] for k in ("data", "base", "train", "eval", "sweeps", "exec")}
    found = [x for k, cls in sections.items() for x in open_fields(cls, k)]
    found += open_fields(typing.get_type_hints(GridConfig)["world"].__args__[0], "world")
    found += open_fields(OrbitParams, "variants[].params")
    assert found == []
