# SPDX-License-Identifier: MIT
"""pdkv.kv.KVConnector end to end on real brokers: paged caches saved layer
by layer over several steps and loaded into other blocks, admission
pressure (a receive pool far smaller than the requests), tensor parallel 2
on both sides, and wait_for_layer_load. Failures, bad input and close() are in
test_kv_failures.py, which uses the helpers here."""
import time

import numpy as np
import pytest

import pdkv
import pdkv.local
from pdkv.kv import KVConnector
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S, Call

LAYERS = ("l0", "l1", "l2")
BLOCK = (2, 4, 2, 32)  # (k/v, block tokens, heads, head dim): 2 KiB of float32
SENTINEL = -7.0        # what every destination block holds until a load writes it
FAST_S = 0.5           # the longest one connector call may take (none waits on a request)


def paged(num_blocks, layers=LAYERS, block=BLOCK, seed=None):
    """{layer: float32 [num_blocks, *block]}: random (seed), else SENTINEL."""
    if seed is None:
        return {l_: np.full((num_blocks,) + block, SENTINEL, np.float32) for l_ in layers}
    rng = np.random.default_rng(seed)
    return {l_: rng.standard_normal((num_blocks,) + block).astype(np.float32) for l_ in layers}


def assert_loaded(src, src_ids, dst, dst_ids):
    for l_ in src:
        for s, d in zip(src_ids, dst_ids):
            assert np.array_equal(dst[l_][d], src[l_][s]), (l_, s, d)


def assert_untouched(dst, used_ids):
    for l_, arr in dst.items():
        for b in range(arr.shape[0]):
            if b not in used_ids:
                assert (arr[b] == SENTINEL).all(), (l_, b)


class Timed:
    """A connector whose every call is timed: worst[name] is its longest (s)."""

    def __init__(self, conn, worst):
        self._conn, self.worst = conn, worst

    def __getattr__(self, name):
        fn = getattr(self._conn, name)
        if not callable(fn):
            return fn

        def call(*a, **kw):
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                dt = time.monotonic() - t0
                self.worst[name] = max(self.worst.get(name, 0.0), dt)
        return call


class Rig:
    """Brokers, agents and connectors of one test, all closed at its end: the
    agents first (their waits end), then the connectors (their waiters end),
    then the brokers."""

    def __init__(self):
        self.brokers, self.agents, self.conns = [], [], []
        self.worst = {}

    def broker(self, role, slots, slot_size="4K", **flags):
        kw = {"send_slots": slots} if role == "prefill" else {"recv_slots": slots}
        b = pdkv.local.LocalBroker(role=role, slot_size=slot_size, **kw, **flags)
        self.brokers.append(b)
        return b

    def agent(self, broker, **kw):
        ag = broker.agent(**kw)
        self.agents.append(ag)
        return ag

    def conn(self, agent, role, caches=None, **kw):
        c = KVConnector(agent, role, **kw)
        self.conns.append(c)
        if caches is not None:
            c.register_kv_caches(caches)
        return Timed(c, self.worst)

    def close(self):
        for ag in self.agents:
            ag.close()
        for c in self.conns:
            c.close()
        for b in self.brokers:
            b.stop()


@pytest.fixture
def rig():
    r = Rig()
    try:
        yield r
    finally:
        r.close()


class Pump:
    """The end-of-step calls, repeated: wait_for_save + get_finished on the
    senders, get_finished on the receivers. Collects what they report (each
    request reported once per connector) and their failures."""

    def __init__(self, senders=(), receivers=()):
        self.senders, self.receivers = list(senders), list(receivers)
        self.sent = [set() for _ in self.senders]
        self.received = [set() for _ in self.receivers]
        self.sfail = [{} for _ in self.senders]
        self.rfail = [{} for _ in self.receivers]

    def step(self):
        for i, s in enumerate(self.senders):
            s.wait_for_save()
            sent, received = s.get_finished()
            assert not received and not (sent & self.sent[i]), (sent, self.sent[i])
            self.sent[i] |= sent
            self.sfail[i].update(s.failures())
        for i, r in enumerate(self.receivers):
            sent, received = r.get_finished()
            assert not sent and not (received & self.received[i]), (received, self.received[i])
            self.received[i] |= received
            self.rfail[i].update(r.failures())

    def until(self, sent=(), received=(), timeout=WAIT_S):
        """Step until every sender reported sent and every receiver received."""
        deadline = time.monotonic() + timeout
        while not (all(set(sent) <= s for s in self.sent) and
                   all(set(received) <= r for r in self.received)):
            assert time.monotonic() < deadline, \
                "sent %s received %s failures %s %s after %.0f s" % (
                    self.sent, self.received, self.sfail, self.rfail, timeout)
            self.step()
            time.sleep(0.005)

    def settle(self, seconds):
        """Keep stepping for a while (to see nothing more is reported)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.step()
            time.sleep(0.01)


def report(worst):
    print("\nworst call times: " + ", ".join("%s %.1f ms" % (k, v * 1e3)
                                             for k, v in sorted(worst.items())))


# ---- tensor parallel 1 ---------------------------------------------------------------------

def test_round_trip_layer_by_layer_over_steps_into_other_blocks(rig):
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 64)
    src, dst = paged(24, seed=1), paged(24)
    s = rig.conn(rig.agent(pre), "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst)
    reqs = {"A": ([3, 7, 1, 12, 20], [23, 22, 21, 20, 19]),  # (source, destination blocks)
            "B": ([0, 2, 4], [1, 3, 5]),
            "C": ([5, 6, 8, 9, 10, 11], [6, 8, 10, 12, 14, 16])}
    for q, (sids, dids) in reqs.items():
        s.declare(q, dec.ctrl, len(sids))
        r.start_load_kv(q, dids)
    pump = Pump([s], [r])
    # A chunked prefill: each step computes the next two blocks of every request,
    # saved layer by layer as the forward goes (a request done with is not named).

    def blocks(sids, step):
        return [(b, sids[b]) for b in range(2 * step, min(2 * step + 2, len(sids)))]

    for step in range(3):
        for l_ in LAYERS:
            s.save_kv_layer(l_, {q: blocks(sids, step) for q, (sids, _) in reqs.items()
                                 if blocks(sids, step)})
        pump.step()
        unsaved = {q for q, (sids, _) in reqs.items() if len(sids) > 2 * step + 2}
        early = (pump.sent[0] | pump.received[0]) & unsaved
        assert not early, "reported before their last blocks were saved: %s" % early
    pump.until(sent=reqs, received=reqs)
    assert pump.sent == [set(reqs)] and pump.received == [set(reqs)]
    assert pump.sfail == [{}] and pump.rfail == [{}]
    for q, (sids, dids) in reqs.items():
        assert_loaded(src, sids, dst, dids)
    assert_untouched(dst, {d for _, dids in reqs.values() for d in dids})
    block = src["l0"][0].nbytes
    for q, (sids, _) in reqs.items():
        assert s.stats[q][0] == r.stats[q][0] == block * len(sids) * len(LAYERS)
    assert max(rig.worst.values()) < FAST_S, rig.worst
    report(rig.worst)


def test_admission_pressure_saves_before_admission_are_staged_later(rig):
    """The receive pool (8 slots) holds one request (6 chunks) at a time, of the
    30 together; the send pool (4) not even one. Step 1 saves every layer of every
    request, most of them not admitted; the later steps only end the step. All
    arrive intact, and no call waits for admission."""
    pre, dec = rig.broker("prefill", 4), rig.broker("decode", 8)
    layers = ("l0", "l1")
    src, dst = paged(16, layers, seed=2), paged(16, layers)
    tx = rig.agent(pre)
    s = rig.conn(tx, "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst)
    reqs = {"R%d" % i: ([3 * i, 3 * i + 1, 3 * i + 2], [15 - 3 * i, 14 - 3 * i, 13 - 3 * i])
            for i in range(5)}
    for q, (sids, dids) in reqs.items():
        s.declare(q, dec.ctrl, len(sids))
        r.start_load_kv(q, dids)
    for l_ in layers:
        s.save_kv_layer(l_, {q: list(enumerate(sids)) for q, (sids, _) in reqs.items()})
    s.wait_for_save()
    waiting = [q for q in reqs if tx.req_state(q)[0] == pdkv.REQ_DECLARED]
    assert len(waiting) >= 4, "saved while not admitted: %s" % waiting
    # From here on nothing is saved: what was pending is staged by these calls.
    pump = Pump([s], [r])
    pump.until(sent=reqs, received=reqs, timeout=2 * WAIT_S)
    assert pump.sfail == [{}] and pump.rfail == [{}]
    for q, (sids, dids) in reqs.items():
        assert_loaded(src, sids, dst, dids)
    assert_untouched(dst, {d for _, dids in reqs.values() for d in dids})
    assert max(rig.worst.values()) < FAST_S, rig.worst
    report(rig.worst)


# ---- tensor parallel 2 ---------------------------------------------------------------------

def tp2(rig, recv_slots):
    """Two prefill ranks and two decode ranks (agents attached with tp_rank and
    tp_size 2); each sending rank holds its own half of the heads."""
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", recv_slots)
    full = paged(8, block=(2, 4, 4, 32), seed=3)  # 4 heads, 2 per rank
    src = [{l_: np.ascontiguousarray(a[:, :, :, 2 * k:2 * k + 2]) for l_, a in full.items()}
           for k in range(2)]
    assert not np.array_equal(src[0]["l0"], src[1]["l0"])
    dst = [paged(8), paged(8)]
    senders = [rig.conn(rig.agent(pre, tp_rank=k, tp_size=2), "sender", src[k],
                        tp_rank=k, tp_size=2) for k in range(2)]
    receivers = [rig.conn(rig.agent(dec, tp_rank=k, tp_size=2), "receiver", dst[k],
                          tp_rank=k, tp_size=2) for k in range(2)]
    return dec, src, dst, senders, receivers


def save_all(senders, reqs):
    for l_ in LAYERS:
        for s in senders:
            s.save_kv_layer(l_, {q: list(enumerate(sids)) for q, (sids, _) in reqs.items()})


def test_tp2_each_decode_rank_gets_its_sending_ranks_half(rig):
    reqs = {"A": ([0, 1, 2], [7, 6, 5]), "B": ([4, 5], [0, 1])}
    dec, src, dst, senders, receivers = tp2(rig, 64)
    for q, (sids, dids) in reqs.items():
        for s in senders:
            s.declare(q, dec.ctrl, len(sids))
        for r in receivers:
            r.start_load_kv(q, dids)
    save_all(senders, reqs)
    pump = Pump(senders, receivers)
    pump.until(sent=reqs, received=reqs)
    assert pump.sfail == [{}, {}] and pump.rfail == [{}, {}]
    for k in range(2):
        for q, (sids, dids) in reqs.items():
            assert_loaded(src[k], sids, dst[k], dids)
        assert_untouched(dst[k], {7, 6, 5, 0, 1})


def test_tp2_rank1_copies_after_rank0_finished_and_released(rig):
    """The decode pool holds just this request (2 ranks x 3 layers x 2 blocks):
    rank 0 loads and releases it, and only then does rank 1 start its load. The
    broker keeps the request until rank 1 released too, and then frees it (the
    next request, as large, gets the pool)."""
    reqs = {"A": ([2, 3], [4, 5])}
    dec, src, dst, senders, receivers = tp2(rig, 12)
    for s in senders:
        s.declare("A", dec.ctrl, 2)
    receivers[0].start_load_kv("A", [4, 5])
    save_all(senders, reqs)
    first = Pump(senders, receivers[:1])
    first.until(sent=["A"], received=["A"])
    assert first.rfail == [{}]
    assert_loaded(src[0], [2, 3], dst[0], [4, 5])
    first.settle(0.3)  # rank 0 is long done (and released) ...
    receivers[1].start_load_kv("A", [4, 5])  # ... when rank 1 starts
    second = Pump([], receivers[1:])
    second.until(received=["A"])
    assert second.rfail == [{}]
    assert_loaded(src[1], [2, 3], dst[1], [4, 5])
    assert_untouched(dst[1], {4, 5})
    reqs = {"B": ([6, 7], [0, 1])}
    for s in senders:
        s.declare("B", dec.ctrl, 2)
    for r in receivers:
        r.start_load_kv("B", [0, 1])
    save_all(senders, reqs)
    third = Pump(senders, receivers)
    third.until(sent=["B"], received=["B"])
    assert third.sfail == [{}, {}] and third.rfail == [{}, {}]
    for k in range(2):
        assert_loaded(src[k], [6, 7], dst[k], [0, 1])


# ---- wait_for_layer_load -------------------------------------------------------------------

def test_wait_for_layer_load_blocks_until_the_layer_is_in(rig):
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 32)
    src, dst = paged(8, seed=4), paged(8)
    s = rig.conn(rig.agent(pre), "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst)
    reqs = {"A": ([0, 1], [6, 7]), "B": ([2, 3, 4], [1, 2, 3])}
    for q, (sids, dids) in reqs.items():
        s.declare(q, dec.ctrl, len(sids))
        r.start_load_kv(q, dids)
    delay = 0.4

    def prefill():  # another process's engine, late: its first layer after delay
        time.sleep(delay)
        for l_ in LAYERS:
            s.save_kv_layer(l_, {q: list(enumerate(sids)) for q, (sids, _) in reqs.items()})
            time.sleep(0.05)
        s.wait_for_save()
        Pump([s]).until(sent=reqs)

    t0 = time.monotonic()
    job = Call(prefill)
    r.wait_for_layer_load("l0")
    assert time.monotonic() - t0 >= delay - 0.05, "returned before anything was sent"
    for q, (sids, dids) in reqs.items():
        assert_loaded({"l0": src["l0"]}, sids, {"l0": dst["l0"]}, dids)
    for l_ in LAYERS[1:]:
        r.wait_for_layer_load(l_)
        for q, (sids, dids) in reqs.items():
            assert_loaded({l_: src[l_]}, sids, {l_: dst[l_]}, dids)
    assert r.get_finished() == (set(), set(reqs))  # all layers in: reported at once
    assert r.failures() == {}
    assert job.join(WAIT_S) and job.error is None, job.error
    assert_untouched(dst, {6, 7, 1, 2, 3})
