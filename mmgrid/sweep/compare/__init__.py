"""``mmgrid compare``: two runs compared cell by cell, paired per user.

* :mod:`~mmgrid.sweep.compare.runs` - ``compare_runs(registry_a, registry_b, CompareSpec(...))``, the
  paired comparison (what a cell is, how rows pair, what cannot be paired);
The ``mmgrid compare RUN_A RUN_B`` command is :mod:`mmgrid.cli.compare`. Nothing is imported here,
so that the command-line parser does not load pandas or scipy.
"""
