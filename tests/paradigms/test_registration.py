"""The paradigm table: a leaf module that paradigm modules fill, looked up through the package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mmgrid.errors import UnknownNameError
from mmgrid.paradigms import PARADIGM_MODULES, get_paradigm, paradigm_names, register_paradigm
from mmgrid.paradigms import registration


def test_every_paradigm_module_registers_its_name() -> None:
    assert {"text", "semid", "emb", "sasrec"} <= set(paradigm_names())
    assert set(PARADIGM_MODULES) == {"text", "semid", "emb", "sasrec"}
    assert get_paradigm("sasrec").name == "sasrec"


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="sasrec") as ei:
        get_paradigm("sasrek")
    assert "sasrek" in str(ei.value)


def test_register_paradigm_adds_a_factory() -> None:
    class Fake:
        name = "h4_fake"

    try:
        assert register_paradigm("h4_fake")(Fake) is Fake
        got = get_paradigm("h4_fake")
        assert isinstance(got, Fake) and got is not get_paradigm("h4_fake")  # a new instance per lookup
    finally:
        registration.PARADIGMS.remove("h4_fake")


def test_importing_the_package_loads_no_paradigm_module() -> None:
    """The `# lazy:` comment of mmgrid/paradigms/__init__.py: Checkpoint users never pay torch."""
    code = (
        "import sys, mmgrid.paradigms, mmgrid.paradigms.base, mmgrid.paradigms.registration\n"
        "print(sorted(m for m in ('torch', 'mmgrid.paradigms.text', 'sentence_transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
