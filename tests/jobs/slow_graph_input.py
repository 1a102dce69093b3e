"""A graph input that is slow to open (``slowfile://``, a local file after ``SLEEP_S``), and the
pagerank job under a name that imports this module, so that cluster workers (forked or
spawned with this process's import path) see the same filesystem: loading that takes longer
than ``worker_timeout`` must not look like a lost worker."""

from __future__ import annotations

import dataclasses
import time

import fsspec
from fsspec.implementations.local import LocalFileSystem

from mariana.jobs import get_job

SLEEP_S = 2.5


class SlowFileSystem(LocalFileSystem):
    protocol = "slowfile"

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("slowfile://"):
            path = path[len("slowfile://"):]
        return super()._strip_protocol(path)

    def _open(self, path, mode="rb", **kwargs):
        time.sleep(SLEEP_S)  # a cold object store, a busy HDFS namenode, ...
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("slowfile", SlowFileSystem, clobber=True)

JOB = dataclasses.replace(get_job("pagerank"), name="slow-pagerank")
