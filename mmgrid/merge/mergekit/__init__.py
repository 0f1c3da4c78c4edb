"""mergekit recipes run by mmgrid's engine: ``run_mergekit_recipe(path_or_dict, out,
registry=None)`` (also ``mmgrid merge --mergekit recipe.yml --out DIR``).

Layout (imports point down): ``table`` (mergekit method -> mmgrid method and parameters)
-> ``spec`` (the YAML read and checked, settings evaluated per tensor) -> ``folder`` (the
torch-free part of HF folders: files, publishing, result types, the card) -> ``hf`` (HF
folders in and out) -> ``run`` (the merge) -> ``entry`` (the recipe checked, then merged by
``run`` or, a plain passthrough, copied without importing torch); ``oracle`` (finding
mergekit's own Python for the oracle test and the benchmark) stands alone.
"""

from __future__ import annotations

from mmgrid.merge.mergekit.oracle import find_mergekit_python
from mmgrid.merge.mergekit.entry import run_mergekit_recipe
from mmgrid.merge.mergekit.folder import MergekitResult
from mmgrid.merge.mergekit.spec import METHOD_TABLE, load, supported_methods

__all__ = ["METHOD_TABLE", "MergekitResult", "find_mergekit_python", "load", "run_mergekit_recipe", "supported_methods"]
