"""Extension points (mmgrid/plugins.py, docs/extending.md): names registered by mmgrid, by Python
code and by installed distributions' entry points, each with its source; entry points read lazily
in every process (local pool workers too); clashes and broken plugins as named errors."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import torch

from mmgrid.errors import PluginError, UnknownNameError
from mmgrid.merge.methods import METHODS, get_method, method_names, register_method, registered_methods
from mmgrid.paradigms import get_paradigm, paradigm_names
from mmgrid.paradigms.registration import PARADIGMS
from mmgrid.plugins import PluginTable, Source
from mmgrid.sweep.studies import STUDIES, Study, StudyOptions, get_study, register_study, run_study, study_names
from tests.plugin_site import REPO, install, sign_consensus_site

TABLES = (METHODS, PARADIGMS, STUDIES)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder on sys.path for plugin distributions; afterwards every table forgets what they added."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    for t in TABLES:
        t.refresh()
    before = {id(t): set(e.name for e in t.entries(load=False)) for t in TABLES}
    yield folder
    for t in TABLES:
        for e in t.entries(load=False):
            if e.name not in before[id(t)] and e.source.kind != "built-in":  # a built-in module imported meanwhile stays
                t.remove(e.name)
        t.refresh()
    for name in [m for m in sys.modules if m.startswith("mmgrid_")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def test_an_installed_method_is_found_on_its_first_lookup_with_its_distribution(site: Path) -> None:
    sign_consensus_site(site)
    assert get_method("average").__module__ == "mmgrid.merge.methods.average"  # a built-in reads no entry point
    assert "mmgrid_sign_consensus" not in sys.modules
    cls = get_method("sign_consensus")
    assert cls.__module__ == "mmgrid_sign_consensus" and cls.name == "sign_consensus"
    entry = {e.name: e for e in METHODS.entries(load=False)}["sign_consensus"]
    assert entry.source == Source("distribution", "mmgrid-sign-consensus 0.1.0",
                                  "mmgrid.merge_methods: sign_consensus = mmgrid_sign_consensus:SignConsensus")
    assert {e.source.kind for e in METHODS.entries(load=False) if e.name != "sign_consensus"} == {"built-in"}
    assert "sign_consensus" in method_names() and registered_methods()["sign_consensus"] is cls


def test_the_documented_method_computes_its_formula(site: Path) -> None:
    """theta_0 + scale * mean tau where every tau agrees in sign (a zero tau agrees with nothing), by hand."""
    from mmgrid.merge import merge

    sign_consensus_site(site)
    a = {"w": torch.tensor([1.0, -2.0, 3.0, 0.0]), "b": torch.tensor([[2.0, 2.0]])}
    b = {"w": torch.tensor([2.0, 1.0, 5.0, 1.0]), "b": torch.tensor([[-1.0, 4.0]])}
    base = {"w": torch.tensor([0.0, 0.0, 1.0, 0.0]), "b": torch.tensor([[1.0, 1.0]])}
    # w: taus [1, -2, 2, 0] and [2, 1, 4, 1] agree at 0 and 2 (means 1.5, 3); b: [1, 1] and [-2, 3] at 1 (mean 2)
    out = merge("sign_consensus", [a, b], base=base, scale=0.5)
    assert torch.equal(out["w"], torch.tensor([0.75, 0.0, 2.5, 0.0]))
    assert torch.equal(out["b"], torch.tensor([[1.0, 2.0]]))


def test_a_plugin_that_clashes_with_a_builtin_names_both(site: Path) -> None:
    install(site, "mmgrid-own-average", {"mmgrid_own_average": (
        "from mmgrid.merge.methods.average import Average\n"
        "class OwnAverage(Average):\n    name = 'average'\n")},
        {"mmgrid.merge_methods": {"average": "mmgrid_own_average:OwnAverage"}})
    assert get_method("average").__module__ == "mmgrid.merge.methods.average"  # never shadowed
    with pytest.raises(PluginError) as ei:
        method_names()  # a listing reads every entry point
    msg = str(ei.value)
    assert "'average' is registered twice" in msg
    assert "built-in module mmgrid.merge.methods.average" in msg
    assert "distribution mmgrid-own-average 0.1.0 (entry point mmgrid.merge_methods: average = " in msg


def test_registering_a_builtin_name_from_python_is_refused() -> None:
    from mmgrid.merge.methods.average import Average

    class Mine(Average):
        name = "ties"

    with pytest.raises(PluginError, match=r"'ties' is registered twice: by built-in module mmgrid.merge.methods.ties "
                                          r"and by python module (tests\.)?test_plugins\."):
        register_method(Mine)
    assert get_method("ties").__module__ == "mmgrid.merge.methods.ties"


def test_two_plugins_of_one_name_name_both_distributions(site: Path) -> None:
    code = ("from mmgrid.merge.methods.average import Average\n"
            "class Twin(Average):\n    name = 'twin'\n")
    install(site, "mmgrid-twin-a", {"mmgrid_twin_a": code}, {"mmgrid.merge_methods": {"twin": "mmgrid_twin_a:Twin"}})
    install(site, "mmgrid-twin-b", {"mmgrid_twin_b": code}, {"mmgrid.merge_methods": {"twin": "mmgrid_twin_b:Twin"}})
    with pytest.raises(PluginError) as ei:
        get_method("twin")
    assert "distribution mmgrid-twin-a 0.1.0" in str(ei.value) and "distribution mmgrid-twin-b 0.1.0" in str(ei.value)


def test_a_broken_plugin_is_a_named_error_that_spares_other_names(site: Path) -> None:
    install(site, "mmgrid-broken", {"mmgrid_broken": "import no_such_module_anywhere\n"},
            {"mmgrid.merge_methods": {"broken": "mmgrid_broken:Broken"}})
    for _ in range(2):  # every lookup says so again, nothing is half-registered
        with pytest.raises(PluginError) as ei:
            get_method("broken")
        msg = str(ei.value)
        assert "merge method plugin 'broken' cannot be imported" in msg
        assert "distribution mmgrid-broken 0.1.0 (entry point mmgrid.merge_methods: broken = mmgrid_broken:Broken)" in msg
        assert "ModuleNotFoundError" in msg and "pip uninstall mmgrid-broken" in msg
    assert get_method("ties").name == "ties"
    with pytest.raises(UnknownNameError, match="'tiess'.*Did you mean 'ties'"):
        get_method("tiess")  # an unknown name reads only the entry points of that name


def test_an_entry_point_must_hold_a_method_of_its_own_name(site: Path) -> None:
    install(site, "mmgrid-misnamed", {"mmgrid_misnamed": (
        "from mmgrid.merge.methods.average import Average\n"
        "class Other(Average):\n    name = 'other_name'\n"
        "NOT_A_CLASS = 3\n")},
        {"mmgrid.merge_methods": {"misnamed": "mmgrid_misnamed:Other", "number": "mmgrid_misnamed:NOT_A_CLASS"}})
    with pytest.raises(PluginError, match=r"misnamed.*is named 'other_name'; the entry point's name and the class's"):
        get_method("misnamed")
    with pytest.raises(PluginError, match=r"'number' of distribution mmgrid-misnamed.*not a subclass of "
                                          r"mmgrid.merge.methods.Method"):
        get_method("number")


def test_the_same_definition_may_be_registered_again() -> None:
    table = PluginTable("thing", "mmgrid.tests_nothing")
    ns: dict = {}
    code = compile("class Thing:\n    pass\n", __file__, "exec")  # one file, one qualified name
    for _ in range(2):  # a module run a second time (a notebook cell, importlib.reload)
        exec(code, {"__name__": __name__}, ns)
        table.register("thing", ns["Thing"])
    assert table.get("thing") is ns["Thing"]

    class Other:
        pass

    with pytest.raises(PluginError, match="'thing' is registered twice"):
        table.register("thing", Other)


def test_paradigms_and_studies_come_from_entry_points_too(site: Path) -> None:
    install(site, "mmgrid-toy", {"mmgrid_toy": (
        "from mmgrid.sweep.studies import Study\n"
        "class ToyParadigm:\n    name = 'toyplug'\n"
        "def run(cfg, registry, options):\n    return dict(options.params)\n"
        "STUDY = Study('toy_study', run, lambda r: f'toy {sorted(r.items())}', params=('k',))\n")},
        {"mmgrid.paradigms": {"toyplug": "mmgrid_toy:ToyParadigm"}, "mmgrid.studies": {"toy_study": "mmgrid_toy:STUDY"}})
    got = get_paradigm("toyplug")
    assert type(got).__name__ == "ToyParadigm" and got is not get_paradigm("toyplug")  # a new instance per lookup
    assert {"text", "semid", "emb", "sasrec", "toyplug"} <= set(paradigm_names())
    assert {"temporal", "cross-domain", "continual", "rolling", "toy_study"} <= set(study_names())
    sources = {e.name: e.source for e in STUDIES.entries(load=False)}
    assert sources["toy_study"].origin == "mmgrid-toy 0.1.0" and sources["temporal"].kind == "built-in"

    class Reg:
        root = "nowhere"

    assert run_study("toy_study", None, Reg(), StudyOptions(None, params={"k": 3})) == ({"k": 3}, "toy [('k', 3)]")
    with pytest.raises(Exception, match=r"--set j: not a parameter of this study; it takes k"):
        run_study("toy_study", None, Reg(), StudyOptions(None, params={"j": 1}))


def test_a_study_registered_from_python_and_its_clash() -> None:
    def run(cfg, registry, options):
        return 1

    study = Study("py_study_h", run)
    try:
        assert register_study(study) is study and get_study("py_study_h") is study
        assert {e.name: e.source for e in STUDIES.entries(load=False)}["py_study_h"].kind == "python"
    finally:
        STUDIES.remove("py_study_h")
    with pytest.raises(PluginError, match="study 'temporal' is registered twice: by built-in module mmgrid.sweep.studies"):
        register_study(Study("temporal", run))
    with pytest.raises(PluginError, match="not a mmgrid.sweep.studies.Study"):
        STUDIES.register("x", run)


def test_pool_workers_find_the_installed_plugin_themselves(site: Path) -> None:
    """The driver never looks the method up; each spawned (and forkserver) worker reads the entry
    points on its own first lookup. The pool's workers get the driver's sys.path (the site)."""
    from mmgrid.exec.job import Job
    from mmgrid.exec.pool import ProcessExecutor

    sign_consensus_site(site)
    want = {"class": "mmgrid_sign_consensus:SignConsensus", "imported_before": False,
            "source": "distribution mmgrid-sign-consensus 0.1.0 (entry point mmgrid.merge_methods: sign_consensus = "
                      "mmgrid_sign_consensus:SignConsensus)"}
    with ProcessExecutor(2) as pool:
        futs = [pool.submit(Job("tests.plugin_site:worker_lookup", {"name": "sign_consensus"})) for _ in range(2)]
        got = [f.result(timeout=300) for f in futs]
    assert all({k: g[k] for k in want} == want for g in got) and all(g["pid"] != os.getpid() for g in got)
    assert "mmgrid_sign_consensus" not in sys.modules  # only the workers imported it
    from tests.plugin_site import worker_lookup

    env_path = os.pathsep.join([str(site), str(REPO)])
    ctx = multiprocessing.get_context("forkserver")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path  # the forkserver process starts from the environment
    try:
        with ProcessPoolExecutor(1, mp_context=ctx) as ex:
            g = ex.submit(worker_lookup, "sign_consensus").result(timeout=300)
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)
    assert {k: g[k] for k in want} == want


def test_mmgrid_plugins_lists_sources_and_names_a_broken_plugin(tmp_path: Path) -> None:
    site = sign_consensus_site(tmp_path / "site")
    install(site, "mmgrid-broken", {"mmgrid_broken": "raise RuntimeError('half-written plugin')\n"},
            {"mmgrid.studies": {"broken_study": "mmgrid_broken:STUDY"}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "MMGRID_QUIET": "1"}
    proc = subprocess.run([sys.executable, "-m", "mmgrid", "plugins"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    out = proc.stdout
    assert re.search(r"merge methods \(\d+ built-in, 1 other; entry-point group mmgrid.merge_methods\):", out)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("sign_consensus"))
    assert "distribution mmgrid-sign-consensus 0.1.0" in line
    assert next(ln for ln in out.splitlines() if ln.strip().startswith("average ")).split()[1:3] == ["built-in", "module"]
    assert "paradigms (4 built-in, 0 other" in out and "studies (4 built-in, 0 other" in out
    assert "broken_study = mmgrid_broken:STUDY  FAILS" in out
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "study plugin 'broken_study' cannot be imported" in err[0]
    assert "RuntimeError: half-written plugin" in err[0] and "Traceback" not in proc.stderr
