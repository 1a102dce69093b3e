"""The cluster runtime: a master and worker processes that run the engine's supersteps over ``comm``.

``master`` (the driver's Backend across processes: joining, the barrier, liveness, recovery),
``worker`` (one partition: compute, the data plane, heartbeats), ``entry`` (the one way a worker
starts: a ``WorkerSpec``), ``forking`` and ``launch`` (local worker processes, ``run_cluster``).
"""
