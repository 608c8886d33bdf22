"""The package version, in a leaf module below every layer: the build records it in
engine cards and the CLI prints it; `workbench/__init__.py` re-exports it."""

__version__ = "0.1.0"
