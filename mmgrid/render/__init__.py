"""The renderings of the studies' typed results (:mod:`mmgrid.sweep.study_records`): nothing here computes
a number that a study records, each function turns a typed result into text, a figure or an export.

* :mod:`~mmgrid.render.report` - ``write_report``: report.md with the paper's tables and figures
  (:mod:`~mmgrid.render.report_temporal`, :mod:`~mmgrid.render.report_rolling`,
  :mod:`~mmgrid.render.report_calibration`), and with ``html=True`` report.html
  (:mod:`~mmgrid.render.report_html`, :mod:`~mmgrid.render.report_html_grid`, the grid's cells and
  checkpoint cards from :mod:`~mmgrid.sweep.grid_view`, every value encoded by
  :mod:`~mmgrid.render.report_html_encode`), all written at once (:mod:`~mmgrid.render.report_files`);
* :mod:`~mmgrid.render.markdown` - a DataFrame as a Markdown table, the provenance appendix, a finding's notes;
* :mod:`~mmgrid.render.continual` - the continual-merging study as the console shows it (`mmgrid sweep continual`);
  the rolling deployment study's text (`mmgrid sweep rolling`) is :func:`~mmgrid.render.report_rolling.rolling_text`;
* :mod:`~mmgrid.render.compare` - two runs compared cell by cell as `mmgrid compare` prints it;
* :mod:`~mmgrid.render.calibration` - `mmgrid calibrate`'s calibration.md and power curve, and
  `mmgrid calibrate --rolling`'s rolling_calibration.md;
* :mod:`~mmgrid.render.figures` - Figures 2-5 (matplotlib, imported when a figure is drawn);
* :mod:`~mmgrid.render.mlflow_export` - ``mmgrid export mlflow``: checkpoints and studies as MLflow runs.
"""
