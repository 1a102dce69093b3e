"""Every kind of message that travels between processes, in one place.

Control plane (worker DEALER -> master ROUTER)::

    worker -> master   HELLO, READY, DONE, CHECKPOINTED, RESULT, ERROR, HEARTBEAT
    master -> worker   WELCOME, REFUSE, BEGIN, CHECKPOINT, ROLLBACK, FINISH, BYE, ABORT, HEARTBEAT

Data plane (worker DEALER -> peer ROUTER): one batch per peer per superstep, as one BATCH or as
several (``part`` 0, 1, ...) of which the last says ``last``.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Kind"]


class Kind(IntEnum):
    HELLO = 1       # worker joins: version, host, pid, data endpoint
    WELCOME = 2     # master accepts: worker index, job name + config, peers, timeouts
    REFUSE = 3      # master refuses: version or job mismatch, job full
    READY = 4       # worker built its partition and connected to its peers
    BEGIN = 5       # run superstep s with these aggregates and broadcasts
    BATCH = 6       # one worker's messages for one peer, sent in superstep s
    DONE = 7        # worker finished superstep s: partial aggregates, counts, stats
    FINISH = 8      # the job is over: send your vertices' results
    RESULT = 9      # vertex id -> result()
    BYE = 10        # results received: exit
    ABORT = 11      # the job failed elsewhere: exit now
    ERROR = 12      # this worker failed (vertex error, cannot import the job, ...)
    HEARTBEAT = 13  # liveness, both ways; carries the sender's clock
    CHECKPOINT = 14     # write your part of the checkpoint taken before superstep s
    CHECKPOINTED = 15   # my parts are written (checkpoint, parameter snapshot), or why not
    ROLLBACK = 16       # a worker was lost: reload the checkpoint before superstep s, new peers
