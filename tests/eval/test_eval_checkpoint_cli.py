"""`mmgrid eval --registry ROOT ID --domain D` right after a build: the prepared data beside the
registry is found (the README example), a wrong or absent one is a named error, and the
evaluation is recorded with its per-user values."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import train_fakes as F  # noqa: E402

from mmgrid.cli import main  # noqa: E402
from mmgrid.errors import ConfigError  # noqa: E402
from mmgrid.registry.api import Registry  # noqa: E402
from mmgrid.runtime.checkpoints import checkpoint_meta  # noqa: E402
from mmgrid.runtime.context import forget, put_prepared  # noqa: E402


def _run_folder(tmp: Path, fingerprint: str = "fake0") -> tuple[Path, str]:
    """runs/NAME/{prepared,registry} as a build leaves them, with one toy checkpoint of domain A."""
    prepared = F.FakePrepared([F.make_domain("A", seed=0), F.make_domain("B", seed=1)], fingerprint=fingerprint)
    put_prepared(tmp / "prepared", prepared)
    reg = Registry.open(tmp / "registry")
    par = F.ToyParadigm()
    ck = par.save(par.build(None, prepared.domain("A"), {}, 0))
    cid = reg.put(ck.state, {"paradigm": "toy", "domain": "A", "period": "p2"}, "trained", files=ck.files,
                  meta=checkpoint_meta(ck, {}), seed=0, data_fingerprint="fake0")
    reg.close()
    return tmp / "registry", cid


def test_eval_finds_the_prepared_data_beside_the_registry(tmp_path, capsys) -> None:
    root, cid = _run_folder(tmp_path / "demo")
    try:
        assert main(["eval", "--registry", str(root), cid[:10], "--domain", "B"]) == 0
    finally:
        forget()
    assert "on B/test" in capsys.readouterr().out
    reg = Registry.open(root)
    res = reg.results(id=cid, group="all", metric="recall@10")
    assert len(res) == 1 and res["eval_domain"].iloc[0] == "B"
    assert len(reg.per_user(res.iloc[0])) == 30  # every test example of the fake domain B
    assert reg.per_user(res.iloc[0])["recall@10"].mean() == res["value"].iloc[0]


def test_other_prepared_data_or_none_is_a_named_error(tmp_path, capsys) -> None:
    root, cid = _run_folder(tmp_path / "other", fingerprint="fake1")  # prepared again since: another fingerprint
    try:
        assert main(["eval", "--registry", str(root), cid, "--domain", "B"]) != 0
        assert re.search(r"trained on prepared data fake0.*holds data fake1.*--prepared DIR", capsys.readouterr().err)
        lone = tmp_path / "lone"
        reg = Registry.open(lone / "registry")
        par = F.ToyParadigm()
        ck = par.save(par.build(None, F.make_domain("A"), {}, 0))
        cid2 = reg.put(ck.state, {"paradigm": "toy", "domain": "A", "period": "p2"}, "trained", files=ck.files,
                       meta=checkpoint_meta(ck, {}), data_fingerprint="fake0")
        assert main(["eval", "--registry", str(lone / "registry"), cid2, "--domain", "B"]) != 0
        assert re.search(r"no prepared data at .*lone/prepared.*--config CONFIG", capsys.readouterr().err)
        with pytest.raises(ConfigError, match="--prepared DIR"):  # the named error behind the message
            from mmgrid.cli.context import eval_prepared
            import argparse
            eval_prepared(argparse.Namespace(prepared=None, config=None, registry=str(lone / "registry")), None,
                      Registry.open(lone / "registry").get(cid2))
    finally:
        forget()
