"""Evaluation: ranking metrics (:mod:`~mmgrid.eval.metrics`), full-ranking evaluation
(:mod:`~mmgrid.eval.ranking`), text retention (:mod:`~mmgrid.eval.retention`), the
accuracy matrix (:mod:`~mmgrid.eval.matrix`), the most-popular baseline
(:mod:`~mmgrid.eval.popular`), the Table-2-style baseline table (:mod:`~mmgrid.eval.table`),
evaluating a built grid (:mod:`~mmgrid.eval.grid`); the ``mmgrid eval`` command is
:mod:`mmgrid.cli.eval`.

Import the submodules; nothing is imported here, so that ``mmgrid --help`` does not load torch.
"""
