"""Ready-made graphs (jobs) and the ``mariana`` command."""

from .registry import BUILTIN_JOBS, BuildContext, Job, Key, get_job, resolve_config

__all__ = ["Job", "Key", "BuildContext", "BUILTIN_JOBS", "get_job", "resolve_config"]
