"""The training vertices: layers, models, optimizers, the exchanges, data shards and streams, and
the cpu-cluster coordinators; the training jobs in ``mariana/jobs`` wire them into graphs."""
