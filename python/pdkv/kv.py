# SPDX-License-Identifier: MIT
"""A connector-shaped worker API over pdkv, in the shape of the worker side
of vLLM's KV connector (v1): register_kv_caches, save_kv_layer,
wait_for_save, start_load_kv, wait_for_layer_load, get_finished.

One KVConnector per tensor-parallel rank, over that rank's Agent. The KV
cache is paged: per layer an array whose axis 0 is the block id; one block
of one layer (``caches[layer][block_id]``) is one chunk, so it must fit a
slot (Agent.slot_size). Chunk keys are ``"{req_id}/{layer}/{block}/{rank}"``
(the block's index within the request, the sending rank); receiving rank r
reads sending rank r's chunks, so both sides run the same tensor-parallel
size.

Sender (prefill). declare() when the engine schedules a request (its block
count per layer is known then); save_kv_layer() as each layer's blocks are
computed; wait_for_save() at the end of the step; get_finished() every
step. Only admitted requests are staged: a request still waiting for the
receiver keeps its blocks pending in the engine's cache (which the engine
keeps until get_finished() reports the request), and they are staged at a
later call, so a step never waits on admission and staging can never
deadlock.

Receiver (decode). start_load_kv() names the cache blocks a request's KV
goes to; a background waiter learns when all of it has arrived (the GIL
released while it waits); get_finished() copies ready requests in and
reports them; wait_for_layer_load() blocks until one layer of every started
request is in place.

Failures are per request, never an exception inside a layer: a failed
request is reported finished (so the engine frees its blocks) and its
error is in failures(); the rest of its saves in that step are dropped.

A decode group (tp_size > 1) consumes a request once every rank has
copied its part: each rank's connector releases its own, and the broker
frees the request after the last rank's release.
"""
import queue
import threading
import time

from . import (EV_ADMITTED, EV_PUT_DONE, EV_PUT_FAILED, PdkvAgain, PdkvError, PdkvTimeout,
               PdkvTooBig, error_of)

_PUT_MAX = 4096  # chunks in one put
_SLICE_S = 0.2   # a receiver's waits, in slices of this, taking turns


def chunk_key(req_id, layer, block, rank):
    """The chunk key of one block of one layer of a request, from one rank."""
    return ("%s/%s/%d/%d" % (req_id, layer, block, rank)).encode()


class _Send:
    __slots__ = ("endpoint", "total", "admitted", "pending", "staged", "put", "t0", "bytes")

    def __init__(self, endpoint, total):
        self.endpoint = endpoint
        self.total = total
        self.admitted = total == 0
        self.pending = []  # (layer, block, block_id) not staged yet
        self.staged = []   # (loan, key, length) not put yet
        self.put = 0       # chunks put so far
        self.t0 = time.monotonic()
        self.bytes = 0


class _Recv:
    __slots__ = ("block_ids", "ready", "loaded", "info", "t0", "dropped")

    def __init__(self, block_ids):
        self.block_ids = list(block_ids)
        self.dropped = False  # cancel_load(): released when it comes, never reported
        self.ready = False
        self.loaded = set()
        self.info = None
        self.t0 = time.monotonic()


class KVConnector:
    """The KV connector of one tensor-parallel rank. role: "sender" (prefill)
    or "receiver" (decode). load_timeout: how long a receiver waits for a
    started request before failing it (seconds). waiters: the receiver's
    threads waiting for started loads; they take turns over all of them in
    slices of 0.2 s, so a load that arrived is seen however many wait."""

    def __init__(self, agent, role, tp_rank=0, tp_size=1, load_timeout=60.0, waiters=8):
        if role not in ("sender", "receiver"):
            raise ValueError("role: sender or receiver")
        if not 0 <= tp_rank < tp_size:
            raise ValueError("tp_rank: 0 to tp_size - 1")
        self.agent, self.role = agent, role
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.load_timeout = load_timeout
        self.caches = {}
        self._send, self._recv = {}, {}
        self._sent, self._received, self._failed = set(), set(), {}
        self._gone = set()  # ended since the last get_finished(): their saves are dropped
        self.stats = {}  # req_id -> (bytes, seconds from declare/start to done)
        self._ready = queue.Queue()
        self._closing = False
        self._todo = queue.Queue()
        self._threads = []
        if role == "receiver":
            for _ in range(waiters):
                t = threading.Thread(target=self._waiter, daemon=True)
                t.start()
                self._threads.append(t)

    # ---- both sides --------------------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        """The paged KV caches, {layer name: array} (axis 0: block id, C-contiguous);
        a block of a layer must fit a slot."""
        slot = self.agent.slot_size
        for name, arr in kv_caches.items():
            mv = memoryview(arr)
            if not mv.c_contiguous or mv.ndim < 1:
                raise ValueError("layer %s: a C-contiguous array with a block axis" % name)
            if arr[0].nbytes > slot:
                raise ValueError("layer %s: a block is %d bytes, the slot %d" %
                                 (name, arr[0].nbytes, slot))
        self.caches = dict(kv_caches)

    def get_finished(self, finished_req_ids=()):
        """(sent, received): the requests that finished sending / receiving since the
        last call, failed ones too (see failures()). Never blocks on a request."""
        if self.role == "sender":
            self._progress()
        else:
            self._load_ready()
        sent, received = self._sent, self._received
        self._sent, self._received = set(), set()
        self._gone = set()
        return sent, received

    def failures(self):
        """{req_id: PdkvError} of the requests that failed since the last call."""
        f, self._failed = self._failed, {}
        return f

    def close(self):
        """Stop the waiters, within a slice of their waits (the agent stays the
        caller's)."""
        self._closing = True
        for _ in self._threads:
            self._todo.put(None)
        for t in self._threads:
            t.join(5.0)
        self._threads = []

    def _fail(self, req_id, err):
        self._failed[req_id] = err
        self._gone.add(req_id)
        (self._sent if self.role == "sender" else self._received).add(req_id)

    # ---- sender ------------------------------------------------------------------------

    def declare(self, req_id, endpoint, num_blocks, timeout=None):
        """The engine scheduled req_id: its KV is num_blocks blocks per layer, for the
        decode broker at endpoint. Returns at once."""
        total = num_blocks * len(self.caches)
        self.agent.declare(req_id, endpoint, total, world_size=self.tp_size,
                           rank=self.tp_rank, timeout=timeout)
        self._send[req_id] = _Send(endpoint, total)

    def save_kv_layer(self, layer, blocks):
        """This step computed these blocks of layer: {req_id: [(block index in the
        request, block id in the cache), ...]}. Stages those of admitted requests."""
        for req_id, lst in blocks.items():
            r = self._send.get(req_id)
            if r is None and req_id in self._gone:
                continue  # ended in this step (get_finished() reports it): nothing to send
            if r is None:
                raise KeyError("save_kv_layer: %s was not declared" % req_id)
            r.pending.extend((layer, b, bid) for b, bid in lst)
        self._stage()

    def wait_for_save(self):
        """End of the step: hand what this step staged to the broker."""
        self._progress()

    def _progress(self):
        self._stage()
        for req_id in list(self._send):
            r = self._send.get(req_id)
            if r is not None and (r.staged or (r.total == 0 and not r.put)):
                self._flush(req_id, r)

    def _events(self):
        for ev in self.agent.events():
            r = self._send.get(ev.req_id)
            if r is None:
                continue
            if ev.type == EV_ADMITTED:
                r.admitted = True
            elif ev.type == EV_PUT_DONE:
                self.stats[ev.req_id] = (r.bytes, time.monotonic() - r.t0)
                del self._send[ev.req_id]
                self._sent.add(ev.req_id)
            elif ev.type == EV_PUT_FAILED:
                self._drop(ev.req_id, r, error_of(ev.status))

    def _drop(self, req_id, r, err):
        loans = [loan for loan, _, _ in r.staged]
        r.staged = []
        if loans:
            try:
                self.agent.release(loans)
            except PdkvError:
                pass
        self._send.pop(req_id, None)
        self._fail(req_id, err)

    def _stage(self):
        self._events()
        for req_id in list(self._send):
            r = self._send.get(req_id)
            if r is not None and r.admitted and r.pending:
                self._stage_one(req_id, r)

    def _stage_one(self, req_id, r):
        n = len(r.pending)
        while n > 0:  # all of them if the pool has room, else as many as it has
            try:
                loans = self.agent.alloc(req_id, n, timeout=0)
                break
            except (PdkvTimeout, PdkvTooBig):  # busy, or more than the pool: fewer
                n //= 2
            except PdkvAgain:
                return
            except PdkvError as e:
                self._drop(req_id, r, e)
                return
        else:
            return
        for loan, (layer, b, bid) in zip(loans, r.pending[:n]):
            src = self.caches[layer][bid]
            loan.write(memoryview(src).cast("B"))
            r.staged.append((loan, chunk_key(req_id, layer, b, self.tp_rank), src.nbytes))
            r.bytes += src.nbytes
        del r.pending[:n]

    def _flush(self, req_id, r):
        while r.staged or (r.total == 0 and not r.put):  # a request of no blocks: one
            batch = r.staged[:_PUT_MAX]                   # empty last batch says so
            last = r.put + len(batch) == r.total
            try:
                self.agent.put(req_id, r.endpoint, batch, r.total, world_size=self.tp_size,
                               rank=self.tp_rank, last=last)
            except PdkvAgain:
                return  # the ring is full: the next step puts them
            except PdkvError as e:
                self._drop(req_id, r, e)
                return
            r.put += len(batch) or 1  # (the empty batch counts: it is put)
            del r.staged[:len(batch)]

    # ---- receiver ----------------------------------------------------------------------

    def start_load_kv(self, req_id, block_ids):
        """Load req_id's KV: block i of the request goes to cache block block_ids[i]
        of every layer. Returns at once."""
        self._recv[req_id] = _Recv(block_ids)
        self._todo.put(req_id)

    def cancel_load(self, req_id):
        """Forget a started load (the engine learnt the request failed on the
        prefill side, or dropped it): it is not reported. Its chunks, if they
        come, are released as they arrive (within load_timeout), so they never
        hold the receive pool. Returns at once."""
        r = self._recv.get(req_id)
        if r is None:
            return
        if r.ready:
            self._recv.pop(req_id)
            self._release(req_id)
        else:
            r.dropped = True

    def wait_for_layer_load(self, layer, timeout=None):
        """Block until this layer of every started request is in the cache (or the
        request failed). timeout: seconds (None: load_timeout)."""
        deadline = time.monotonic() + (self.load_timeout if timeout is None else timeout)
        for req_id in list(self._recv):
            r = self._recv.get(req_id)
            while r is not None and not r.ready and not r.dropped:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PdkvTimeout(110, "wait_for_layer_load(%s): %s not here" %
                                      (layer, req_id))
                try:
                    self._mark(*self._ready.get(timeout=min(left, 1.0)))
                except queue.Empty:
                    pass
            if r is not None and r.ready and r.info is not None and not r.info.status:
                self._copy_layer(req_id, r, layer)
        self._load_ready()

    def _waiter(self):
        while True:
            req_id = self._todo.get()
            if req_id is None:
                return
            r = self._recv.get(req_id)
            if r is None or self._closing:
                continue
            # One slice, then the next load's turn (round robin): a waiter never
            # sits on a load the receiver has not admitted while one it has waits.
            left = r.t0 + self.load_timeout - time.monotonic()
            try:
                info = self.agent.recv_wait(req_id, timeout=max(0.0, min(left, _SLICE_S)))
                self._ready.put((req_id, info, None))
            except PdkvTimeout as e:
                if left <= _SLICE_S:
                    self._ready.put((req_id, None, e))
                else:
                    self._todo.put(req_id)
            except PdkvError as e:
                self._ready.put((req_id, None, e))

    def _mark(self, req_id, info, err):
        r = self._recv.get(req_id)
        if r is None:
            return
        r.ready = True
        r.info = info
        if r.dropped:
            self._recv.pop(req_id)
            if err is None:
                self._release(req_id)
            return
        if err is not None or info.status:
            self._recv.pop(req_id)
            self._release(req_id)
            self._fail(req_id, err if err is not None else error_of(info.status))

    def _load_ready(self):
        while True:
            try:
                self._mark(*self._ready.get_nowait())
            except queue.Empty:
                break
        for req_id in list(self._recv):
            r = self._recv[req_id]
            if r.ready:
                for layer in self.caches:
                    self._copy_layer(req_id, r, layer)

    def _copy_layer(self, req_id, r, layer):
        if layer in r.loaded:
            return
        dst = self.caches[layer]
        try:
            for b, bid in enumerate(r.block_ids):
                c = self.agent.lookup(chunk_key(req_id, layer, b, self.tp_rank))
                c.read_into(memoryview(dst[bid]).cast("B"))
        except PdkvError as e:
            self._recv.pop(req_id, None)
            self._release(req_id)
            self._fail(req_id, e)
            return
        r.loaded.add(layer)
        if len(r.loaded) == len(self.caches):
            self._recv.pop(req_id, None)
            self._release(req_id)
            nbytes = sum(self.caches[l_][0].nbytes for l_ in self.caches) * len(r.block_ids)
            self.stats[req_id] = (nbytes, time.monotonic() - r.t0)
            self._received.add(req_id)

    def _release(self, req_id):
        try:
            self.agent.recv_release(req_id)
        except PdkvError:
            pass  # released already, or the broker gone: nothing is pinned for us
