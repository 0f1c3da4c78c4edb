"""The package version, in a module of its own so that any layer can read it without
importing the root package's ``__init__`` (kept equal to pyproject.toml's version)."""

__version__ = "0.1.0"
