"""fsspec-backed storage: the run directory, model parameters and user files at any URL."""

from .params import load_params, save_params
from .rundir import RunDir, default_run_url, read_bytes, read_text, write_bytes, write_lines, write_text

__all__ = ["RunDir", "read_text", "read_bytes", "write_text", "write_lines", "write_bytes", "default_run_url", "save_params",
           "load_params"]
