"""The merge studies of MMGRid (paper 004) on a built grid, and the report.

* :mod:`~mmgrid.sweep.temporal` - temporal lambda sweeps (Eq. 9-10), ``run_temporal``;
* :mod:`~mmgrid.sweep.crossdomain` - pairs x methods x bases x alpha (Eq. 7-8), ``run_cross_domain``;
* :mod:`~mmgrid.sweep.lambda_model` - lambda* prediction (Eq. 11, Tables 3-4), ``predict_lambda``;
* :mod:`~mmgrid.sweep.study_results` - ``compute_study_results``: every report section's typed record
  (:mod:`~mmgrid.sweep.study_records`), computed before anything is rendered;
* :mod:`~mmgrid.sweep.report` - ``write_report``: report.md with the paper's tables and figures, and with
  ``html=True`` report.html (:mod:`~mmgrid.sweep.report_html`, :mod:`~mmgrid.sweep.report_html_grid`,
  the grid's cells and checkpoint cards from :mod:`~mmgrid.sweep.grid_view`), all written at once
  (:mod:`~mmgrid.sweep.report_files`);
* :mod:`~mmgrid.sweep.mlflow_export` - ``mmgrid export mlflow``: checkpoints and studies as MLflow runs.

Pure parts: :mod:`~mmgrid.sweep.selection` (lambda grid, lambda*, Eq. 11),
:mod:`~mmgrid.sweep.regression` (leave-one-out OLS), :mod:`~mmgrid.sweep.interpolate`
(theta(lambda) in place), :mod:`~mmgrid.sweep.tables`, :mod:`~mmgrid.sweep.figures`.
Shared by the studies: :mod:`~mmgrid.sweep.start_models` (the original base Theta(0) of a
paradigm's task vectors), :mod:`~mmgrid.sweep.evaluation` (in-memory evaluation),
:mod:`~mmgrid.sweep.results` (reading results back).
"""
