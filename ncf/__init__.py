"""NCF pipeline: shared names, logging, command line and the end-to-end run."""

__version__ = "0.1.0"
