"""The data layer: raw files (Amazon Reviews 2023, benchmark CSV, RecBole atomic, or the synthetic
world) → the prepared dataset every later step reads (docs/contracts.md, "Prepared dataset").

Entry points (import the submodules; nothing heavy is imported here):

- ``mmgrid.data.world.write_world(out_dir, WorldConfig) -> Path``
- ``mmgrid.data.prepare.prepare(GridConfig, out=None, strict=None) -> PreparedDataset``
- ``mmgrid.data.prepared.load_prepared(dir) -> PreparedDataset``
- ``mmgrid.data.stats.format_stats(df) -> str``
- ``mmgrid.data.amazon.read_reviews(path)``, ``read_meta(path)``, ``read_benchmark_csv(path)``
- ``mmgrid.data.groups.user_groups(users, interactions, t1, t2)``
"""
