"""Run-time helpers shared by training and evaluation (layer 5, below both ``train`` and ``eval``).

* :mod:`~mmgrid.runtime.checkpoints` - paradigm checkpoints to and from the registry;
* :mod:`~mmgrid.runtime.context` - per-process handles of the registry and the prepared data;
* :mod:`~mmgrid.runtime.device` - device, dtype, seeding, CPU threads;
* :mod:`~mmgrid.runtime.plan` - stage identity (``stage_params``, the config hash) and the grid plan.

Import the submodules; nothing is imported here.
"""
