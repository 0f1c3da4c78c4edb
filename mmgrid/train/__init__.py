"""Building the grid (run layer; never imports :mod:`mmgrid.eval`).

* :mod:`~mmgrid.train.build` - ``build_grid``: plan every id, one job a stage;
* :mod:`~mmgrid.train.stage` - one stage (the job ``run_stage``): load, train, store;
* :mod:`~mmgrid.train.loop` - the training loop; :mod:`~mmgrid.train.base_lm` - the tiny base's LM training;
* :mod:`~mmgrid.train.origin`, :mod:`~mmgrid.train.regularizers` - Orbit, Soup-to-Go, L2-to-init.

The ``mmgrid build`` command is :mod:`mmgrid.cli.train`.

Import the submodules; nothing is imported here.
"""
