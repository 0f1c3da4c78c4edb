"""The merge studies of MMGRid on a built grid; their renderings live in :mod:`mmgrid.render`.

* :mod:`~mmgrid.sweep.temporal` - temporal lambda sweeps (Eq. 9-10), ``run_temporal``;
* :mod:`~mmgrid.sweep.crossdomain` - pairs x methods x bases x alpha (Eq. 7-8), ``run_cross_domain``;
* :mod:`~mmgrid.sweep.lambda_model` - lambda* prediction (Eq. 11, Tables 3-4), ``predict_lambda``;
* :mod:`~mmgrid.sweep.continual`, :mod:`~mmgrid.sweep.rolling`, :mod:`~mmgrid.sweep.calibration` - continual
  merging, the rolling time axis and the calibration study;
* :mod:`~mmgrid.sweep.study_results` - ``compute_study_results``: every report section's typed record
  (:mod:`~mmgrid.sweep.study_records`), computed before anything is rendered;
* :mod:`~mmgrid.sweep.tables` - MMGRid Tables 2-4 as DataFrames with the registry ids behind each row;
* :mod:`~mmgrid.sweep.grid_view` - the grid as report.html shows it (one cell per coordinate, one card per checkpoint).

Pure parts: :mod:`~mmgrid.sweep.selection` (lambda grid, lambda*, Eq. 11),
:mod:`~mmgrid.sweep.regression` (leave-one-out OLS), :mod:`~mmgrid.sweep.interpolate`
(theta(lambda) in place).
Shared by the studies: :mod:`~mmgrid.sweep.start_models` (the original base Theta(0) of a
paradigm's task vectors), :mod:`~mmgrid.sweep.evaluation` (in-memory evaluation),
:mod:`~mmgrid.sweep.results` (reading results back).
"""
