"""Tensor-parallel plumbing for rank processes: an all-reduce over pipes.

Each pair of ranks shares one duplex ``multiprocessing`` Pipe (a Unix
socketpair).  The all-reduce sends this rank's partials as the raw bytes of
float32 arrays to every other rank, receives theirs, and sums them in rank
order with :func:`model.sum_in_rank_order`, the same arithmetic as the
single-process reference, so every rank gets bit-identical results.

Every receive has a deadline: a dead peer ends in EOFError (its end of the
pipe closed) or TimeoutError, never a hang.
"""
import pickle
import time

import numpy as np

from model import F32, sum_in_rank_order


def make_mesh(ctx, tp):
    """Pipes for tp ranks: mesh[r] is rank r's {peer rank: Connection}."""
    mesh = [dict() for _ in range(tp)]
    for a in range(tp):
        for b in range(a + 1, tp):
            ca, cb = ctx.Pipe(duplex=True)
            mesh[a][b], mesh[b][a] = ca, cb
    return mesh


def recv_bytes(conn, deadline, what):
    """conn.recv_bytes() with a deadline (absolute, time.monotonic())."""
    if not conn.poll(max(0.0, deadline - time.monotonic())):
        raise TimeoutError(f"{what}: nothing from the peer in time")
    return conn.recv_bytes()


class PipeGroup:
    """This rank's view of the TP group.  ``timeout`` bounds each exchange."""

    def __init__(self, rank, tp, peers, timeout=60.0):
        self.rank, self.tp, self.peers, self.timeout = rank, tp, peers, timeout

    def exchange(self, payload):
        """All-gather of bytes: returns every rank's payload, in rank order.
        With each peer, the lower rank sends first, so no two ranks wait
        on each other."""
        deadline = time.monotonic() + self.timeout
        out = [None] * self.tp
        out[self.rank] = payload
        for peer in sorted(self.peers):
            conn = self.peers[peer]
            if self.rank < peer:
                conn.send_bytes(payload)
                out[peer] = recv_bytes(conn, deadline, f"rank {peer}")
            else:
                out[peer] = recv_bytes(conn, deadline, f"rank {peer}")
                conn.send_bytes(payload)
        return out

    def exchange_obj(self, obj):
        """All-gather of small picklable objects (control decisions)."""
        return [pickle.loads(b) for b in self.exchange(pickle.dumps(obj))]

    def allreduce(self, parts_per_item):
        """``Model.forward``'s all-reduce: parts_per_item[i] is [this
        rank's partial of item i] (the rank holds one shard).  The items are
        sent together as one message; returns each item's sum over the
        ranks, in rank order."""
        mine = [parts[0] for parts in parts_per_item]
        if self.tp == 1 or not mine:    # no items: none on any rank (they agree)
            return [sum_in_rank_order([p]) for p in mine]
        shapes = [p.shape for p in mine]
        flat = np.concatenate([np.ascontiguousarray(p, F32).ravel() for p in mine])
        ranks = [np.frombuffer(b, dtype=F32) for b in self.exchange(flat.tobytes())]
        out, at = [], 0
        for shape in shapes:
            n = int(np.prod(shape))
            out.append(sum_in_rank_order([r[at:at + n].reshape(shape) for r in ranks]))
            at += n
        return out


def single_group():
    """The group of a tp=1 rank (no peers)."""
    return PipeGroup(0, 1, {})
