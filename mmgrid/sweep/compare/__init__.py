"""``mmgrid compare``: two runs compared cell by cell, paired per user.

* :mod:`~mmgrid.sweep.compare.runs` - ``compare_runs(registry_a, registry_b, CompareSpec(...))``, the
  paired comparison (what a cell is, how rows pair, what cannot be paired);
* :mod:`~mmgrid.sweep.compare.commands` - the ``mmgrid compare RUN_A RUN_B`` command.

Nothing is imported here, so that the command-line parser, which imports the ``commands`` module,
does not load pandas or scipy.
"""
