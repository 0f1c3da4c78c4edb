"""``mmgrid calibrate``: the calibration study and its command.

* :mod:`~mmgrid.sweep.calibration.replicate` - one replicate world through the grid's pipeline, its estimates;
* :mod:`~mmgrid.sweep.calibration.measures` - estimands, population values, type-I error / power / coverage /
  bias / MDE with Monte Carlo standard errors;
* :mod:`~mmgrid.sweep.calibration.study` - the study over planted sizes, its report and power curve;
The command, ``mmgrid calibrate`` and ``--plan``, is :mod:`mmgrid.cli.calibrate`.

docs/calibration.md describes them. Nothing is imported here, so that the command-line parser does not
load the study (pandas, scipy).
"""
