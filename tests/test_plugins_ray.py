"""A Ray worker finds an installed plugin method itself (mmgrid/plugins.py): the driver never looks
it up; the task's process reads the entry points of the distribution on its PYTHONPATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'mmgrid[ray]')")

from mmgrid.exec.job import Job  # noqa: E402
from mmgrid.exec.ray import RayExecutor  # noqa: E402
from tests.plugin_site import REPO, sign_consensus_site  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_ray_task_finds_the_installed_method(tmp_path: Path) -> None:
    site = sign_consensus_site(tmp_path / "site")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        pytest.skip("another test's Ray is running in this process")
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}}
    ex = RayExecutor(num_cpus=1, runtime_env=env)
    try:
        got = ex.submit(Job("tests.plugin_site:worker_lookup", {"name": "sign_consensus"})).result(timeout=600)
    finally:
        ex.shutdown()
    assert got["class"] == "mmgrid_sign_consensus:SignConsensus" and got["pid"] != os.getpid()
    assert got["source"].startswith("distribution mmgrid-sign-consensus 0.1.0 (entry point mmgrid.merge_methods: ")
    assert not got["imported_before"] and "mmgrid_sign_consensus" not in sys.modules
