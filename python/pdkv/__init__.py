# SPDX-License-Identifier: MIT
"""pdkv for Python: hand KV-cache chunks to a pdkv broker, or read them from one.

A worker process (one per tensor-parallel rank) attaches to its node's
broker (pdbroker) as an Agent. A prefill rank declares each request when it
is scheduled, loans staging slots once the receiver admitted it, writes the
KV bytes into them (zero copy: a Loan is a writable buffer over the
broker's shared memory) and puts them; the broker moves them to the decode
node. A decode rank waits for a request, looks its chunks up (a Chunk is a
read-only buffer over the receive memory) and releases it.

    import numpy as np, pdkv
    with pdkv.Agent(roles=pdkv.SEND) as ag:
        ag.declare("req-1", "tcp://10.0.0.2:17500", total_chunks=1)
        while (ev := ag.next_event(timeout=None)).type != pdkv.EV_ADMITTED:
            pass
        [loan] = ag.alloc("req-1", 1)
        np.copyto(np.frombuffer(loan, np.uint8, kv.nbytes), kv.view(np.uint8).ravel())
        ag.put("req-1", "tcp://10.0.0.2:17500", [(loan, b"req-1/0", kv.nbytes)],
               total_chunks=1, last=True)

Calls that can block or copy release the GIL. Errors are PdkvError
(an OSError whose errno is the pdkv code) and its subclasses; bad
arguments are TypeError or ValueError. pdkv.kv is the connector-shaped
layer an engine's KV connector uses; pdkv.local starts brokers for
development and tests.
"""
from . import _pdkv
from ._pdkv import (  # noqa: F401  (re-exported)
    Chunk,
    Event,
    Loan,
    PdkvAccess,
    PdkvAgain,
    PdkvAlready,
    PdkvBusy,
    PdkvCancelled,
    PdkvError,
    PdkvExists,
    PdkvFull,
    PdkvNoSpace,
    PdkvNotConnected,
    PdkvNotFound,
    PdkvProtocol,
    PdkvStale,
    PdkvTimeout,
    PdkvTooBig,
    RecvInfo,
    EV_ADMITTED,
    EV_PUT_DONE,
    EV_PUT_FAILED,
    KEY_MAX,
    RECV,
    REQ_ADMITTED,
    REQ_DECLARED,
    REQ_DONE,
    REQ_FAILED,
    REQ_ID_MAX,
    SEND,
    WORLD_MAX,
    error_of,
    strerror,
    version,
)

__version__ = _pdkv.version()


class Agent(_pdkv.Agent):
    __doc__ = _pdkv.Agent.__doc__

    def events(self):
        """Iterate over the events that have arrived, without waiting."""
        while True:
            ev = self.next_event(0)
            if ev is None:
                return
            yield ev

    def __repr__(self):
        state = "closed" if self.closed else "slot_size=%d" % self.slot_size
        return "<pdkv.Agent %s>" % state


__all__ = [n for n in dir() if not n.startswith("_")]
