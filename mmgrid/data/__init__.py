"""The data layer: raw files (Amazon Reviews 2023, benchmark CSV, RecBole atomic, or the synthetic
world) → the prepared dataset every later step reads (docs/contracts.md, "Prepared dataset").

Modules (import the submodules; nothing heavy is imported here):

- ``pipeline``: the preparation pipeline, ``prepare(GridConfig, out=None, strict=None) -> PreparedDataset``
- ``dataset``: reading a prepared dataset, ``load_prepared(dir) -> PreparedDataset`` / ``DomainData``
- ``sources``: raw files of every source family → one common shape per domain
- ``amazon``, ``recbole``, ``jsonl``: readers of the raw file formats (``read_reviews``, ``read_meta``,
  ``read_benchmark_csv``, ``read_inter``, ...)
- ``splits``: dedupe, k-core, phases, next-item examples; ``groups``: active / non-active users
- ``stats``: the statistics table (``format_stats(df) -> str``); ``hashing``: input file hashes
- ``world_files``: writes the synthetic world (``write_world(out_dir, WorldConfig) -> Path``);
  ``world_simulation``: its generative process; ``vocab``: its word lists
- ``errors``: the named errors of bad data files (the ``world`` / ``prepare`` commands: :mod:`mmgrid.cli.data`)
"""
