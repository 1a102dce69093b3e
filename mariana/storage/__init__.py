"""fsspec-backed storage: the run directory and user files at any URL."""

from .rundir import RunDir, default_run_url, read_text, write_text

__all__ = ["RunDir", "read_text", "write_text", "default_run_url"]
