# SPDX-License-Identifier: MIT
"""pdkv.kv.KVConnector on real brokers: failures are per request. A request
larger than the receive pool, a request cancelled half-way, a load cancelled
(cancel_load), a load whose request never comes (load_timeout); the others
in the same steps complete. Bad input, and close() ending the waiters. The
last three showed bugs of pdkv.kv (/work/notes/kv-bugs.md), fixed in f4e93ce."""
import threading
import time

import numpy as np
import pytest

import pdkv
from pdkv.kv import KVConnector
from test_kv import BLOCK, LAYERS, Pump, assert_loaded, assert_untouched, paged
from test_kv import rig  # noqa: F401 (the fixture)
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S


def wait_state(ag, req_id, state, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while ag.req_state(req_id)[0] != state:
        assert time.monotonic() < deadline, (req_id, ag.req_state(req_id))
        time.sleep(0.005)


def save_step(s, reqs, layers=LAYERS):
    """One step of the sender: each layer saved for every block of every request
    in reqs ({req: (source ids, destination ids)}), then wait_for_save()."""
    for l_ in layers:
        s.save_kv_layer(l_, {q: list(enumerate(sids)) for q, (sids, _) in reqs.items()})
    s.wait_for_save()


def test_a_request_larger_than_the_receive_pool_fails_alone(rig):
    """The receive pool is 16 slots; "big" is 18 chunks (9 blocks x 2 layers),
    refused at admission (E2BIG). It is reported finished with PdkvTooBig; the
    saves of it later in the same step are dropped quietly; ok1 and ok2, saved
    in the same calls, arrive. The decode engine, told by the prefill side,
    cancel_load()s big: never reported, even after load_timeout."""
    layers = ("l0", "l1")
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 16)
    src, dst = paged(16, layers, seed=10), paged(16, layers)
    tx = rig.agent(pre)
    s = rig.conn(tx, "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst, load_timeout=1.0)
    reqs = {"ok1": ([0, 1], [14, 15]), "big": (list(range(2, 11)), list(range(1, 10))),
            "ok2": ([11, 12, 13], [10, 11, 12])}
    t0 = time.monotonic()
    for q, (sids, dids) in reqs.items():
        s.declare(q, dec.ctrl, len(sids))
        r.start_load_kv(q, dids)
    wait_state(tx, "big", pdkv.REQ_FAILED)  # refused: the connector learns it in the step
    save_step(s, reqs, layers)  # l0's save drops big, l1's must not raise
    sent, received = s.get_finished()
    assert "big" in sent and not received
    f = s.failures()
    assert list(f) == ["big"] and isinstance(f["big"], pdkv.PdkvTooBig), f
    r.cancel_load("big")
    pump = Pump([s], [r])
    pump.sent[0] |= sent
    pump.until(sent=reqs, received=["ok1", "ok2"])
    pump.settle(1.5 - (time.monotonic() - t0))  # past big's load_timeout
    assert pump.sfail == [{}] and pump.rfail == [{}]
    assert pump.received == [{"ok1", "ok2"}]
    for q in ("ok1", "ok2"):
        assert_loaded(src, reqs[q][0], dst, reqs[q][1])
    assert_untouched(dst, set(reqs["ok1"][1] + reqs["ok2"][1]))


@pytest.mark.parametrize("saved_after", [True, False], ids=["saved-after", "dropped"])
def test_a_request_cancelled_half_way_fails_alone(rig, saved_after):
    """C's first layer is put in step 1, then the engine cancels it; step 2
    still names C (no exception), or no longer does (the engine dropped it).
    C is reported on both sides, with PdkvCancelled; A and B, in the same
    steps, arrive."""
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 64)
    src, dst = paged(16, seed=11), paged(16)
    tx = rig.agent(pre)
    s = rig.conn(tx, "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst)
    reqs = {"A": ([0, 1], [15, 14]), "C": ([2, 3, 4], [1, 2, 3]), "B": ([5, 6], [9, 8])}
    for q, (sids, dids) in reqs.items():
        s.declare(q, dec.ctrl, len(sids))
        r.start_load_kv(q, dids)
    for q in reqs:
        wait_state(tx, q, pdkv.REQ_ADMITTED)
    pump = Pump([s], [r])
    save_step(s, reqs, LAYERS[:1])  # step 1: layer 0 of everyone, put
    pump.step()
    tx.cancel("C")
    later = reqs if saved_after else {q: reqs[q] for q in ("A", "B")}
    save_step(s, later, LAYERS[1:])  # step 2: the rest
    pump.until(sent=reqs, received=reqs)
    assert list(pump.sfail[0]) == ["C"] and isinstance(pump.sfail[0]["C"], pdkv.PdkvCancelled)
    assert list(pump.rfail[0]) == ["C"] and isinstance(pump.rfail[0]["C"], pdkv.PdkvCancelled)
    for q in ("A", "B"):
        assert_loaded(src, reqs[q][0], dst, reqs[q][1])
    assert_untouched(dst, set(reqs["A"][1] + reqs["B"][1]))


def test_cancel_load_of_an_arrived_request_releases_it_unreported(rig):
    """The receive pool (6) holds A (2 blocks x 3 layers) and nothing more. A
    arrives, the engine cancels its load before get_finished: A is never
    reported, its blocks stay untouched, and its slots are free for B."""
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 6)
    src, dst = paged(8, seed=12), paged(8)
    s = rig.conn(rig.agent(pre), "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst)
    s.declare("A", dec.ctrl, 2)
    r.start_load_kv("A", [0, 1])
    save_step(s, {"A": ([2, 3], [0, 1])})
    Pump([s]).until(sent=["A"])  # every chunk of A is at the receiver
    r.cancel_load("A")
    s.declare("B", dec.ctrl, 2)
    r.start_load_kv("B", [6, 7])
    save_step(s, {"B": ([4, 5], [6, 7])})
    pump = Pump([s], [r])
    pump.until(sent=["B"], received=["B"])
    assert pump.received == [{"B"}] and pump.rfail == [{}] and pump.sfail == [{}]
    assert_loaded(src, [4, 5], dst, [6, 7])
    assert_untouched(dst, {6, 7})


def test_a_load_whose_request_never_comes_times_out(rig):
    """load_timeout 1 s: "ghost" (never declared anywhere) is reported received
    with PdkvTimeout after it; "dropped", cancelled, is never reported; a
    wait_for_layer_load() of a layer of ghost's gives up at its timeout."""
    dec = rig.broker("decode", 8)
    dst = paged(4)
    r = rig.conn(rig.agent(dec), "receiver", dst, load_timeout=1.0)
    t0 = time.monotonic()
    r.start_load_kv("ghost", [0, 1])
    r.start_load_kv("dropped", [2])
    r.cancel_load("dropped")
    with pytest.raises(pdkv.PdkvTimeout):
        r.wait_for_layer_load("l0", timeout=0.2)
    assert time.monotonic() - t0 < 0.9
    pump = Pump([], [r])
    pump.until(received=["ghost"])
    assert time.monotonic() - t0 >= 0.95
    pump.settle(0.3)
    assert pump.received == [{"ghost"}]
    f = pump.rfail[0]
    assert list(f) == ["ghost"] and isinstance(f["ghost"], pdkv.PdkvTimeout), f
    assert_untouched(dst, set())


# ---- bad input, close ----------------------------------------------------------------------

def test_bad_input(rig):
    pre = rig.broker("prefill", 8)
    tx = rig.agent(pre)
    with pytest.raises(ValueError):
        KVConnector(tx, role="x")
    with pytest.raises(ValueError):
        KVConnector(tx, "sender", tp_rank=2, tp_size=2)
    s = rig.conn(tx, "sender")
    strided = np.zeros((8, 2, 4, 4, 32), np.float32)[:, :, :, ::2]  # a view of every 2nd head
    with pytest.raises(ValueError):
        s.register_kv_caches({"l0": strided})
    with pytest.raises(ValueError):
        s.register_kv_caches({"l0": np.asfortranarray(np.zeros((8,) + BLOCK, np.float32))})
    assert tx.slot_size == 4096
    with pytest.raises(ValueError):  # 8 KiB blocks in 4 KiB slots
        s.register_kv_caches({"l0": np.zeros((8, 2, 8, 4, 32), np.float32)})
    with pytest.raises(ValueError):  # one bad layer among good ones
        s.register_kv_caches({"l0": np.zeros((8,) + BLOCK, np.float32),
                              "l1": np.zeros((8, 4097), np.uint8)})
    s.register_kv_caches({"l0": np.zeros((8, 4096), np.uint8)})  # exactly a slot: fine
    with pytest.raises(KeyError):
        s.save_kv_layer("l0", {"never-declared": [(0, 0)]})


def test_close_ends_the_waiters(rig):
    pre, dec = rig.broker("prefill", 8), rig.broker("decode", 8)
    n0 = threading.active_count()
    src, dst = paged(4, seed=5), paged(4)
    s = rig.conn(rig.agent(pre), "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst, waiters=3)
    assert threading.active_count() == n0 + 3
    s.declare("A", dec.ctrl, 1)
    r.start_load_kv("A", [2])
    for l_ in LAYERS:
        s.save_kv_layer(l_, {"A": [(0, 1)]})
    Pump([s], [r]).until(sent=["A"], received=["A"])
    t0 = time.monotonic()
    r.close()
    assert time.monotonic() - t0 < 1.0
    assert threading.active_count() == n0


def test_close_with_a_load_waiting_ends_its_waiter_within_a_slice(rig):
    dec = rig.broker("decode", 8)
    n0 = threading.active_count()
    r = rig.conn(rig.agent(dec), "receiver", paged(4), load_timeout=30.0, waiters=2)
    r.start_load_kv("never", [0])
    time.sleep(0.1)
    t0 = time.monotonic()
    r.close()
    assert time.monotonic() - t0 < 1.5  # within a slice of its wait, not load_timeout
    assert threading.active_count() == n0


def test_close_after_the_agent_ends_waiters_of_pending_loads(rig):
    """A load still waiting (load_timeout 60 s): closing the agent ends its wait,
    then close() ends the waiters."""
    dec = rig.broker("decode", 8)
    n0 = threading.active_count()
    rx = rig.agent(dec)
    r = rig.conn(rx, "receiver", paged(4))
    r.start_load_kv("never", [0])
    time.sleep(0.1)
    rx.close()
    t0 = time.monotonic()
    r.close()
    assert time.monotonic() - t0 < 3.0
    assert threading.active_count() == n0


# ---- were bugs (kv-bugs.md 1-3, fixed in f4e93ce) ----------------------------------------

def test_loads_started_in_another_order_than_admission(rig):
    """The receive pool admits one request at a time, in the prefill's order;
    the decode engine starts the loads the other way round, with fewer waiter
    threads than loads. The admitted one must be seen (and released) while the
    others wait for admission."""
    layers = ("l0", "l1")
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 8)
    src, dst = paged(12, layers, seed=13), paged(12, layers)
    s = rig.conn(rig.agent(pre), "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst, load_timeout=5.0, waiters=2)
    reqs = {"R%d" % i: ([2 * i, 2 * i + 1], [11 - 2 * i, 10 - 2 * i]) for i in range(4)}
    for q, (sids, _) in reqs.items():
        s.declare(q, dec.ctrl, len(sids))  # admitted one at a time (4 chunks, pool 8) ...
    for q in reversed(list(reqs)):
        r.start_load_kv(q, reqs[q][1])     # ... loaded the other way round
    save_step(s, reqs, layers)
    pump = Pump([s], [r])
    pump.until(sent=reqs, received=reqs, timeout=4.0)
    assert pump.sfail == [{}] and pump.rfail == [{}]
    for q, (sids, dids) in reqs.items():
        assert_loaded(src, sids, dst, dids)
    assert_untouched(dst, {d for _, dids in reqs.values() for d in dids})


def test_cancel_load_before_arrival_frees_the_slots_when_it_arrives(rig):
    """A load cancelled before its request came: the chunks, when they come, are
    released unreported, so the next request (the whole pool again) arrives."""
    pre, dec = rig.broker("prefill", 32), rig.broker("decode", 6)
    src, dst = paged(8, seed=14), paged(8)
    s = rig.conn(rig.agent(pre), "sender", src)
    r = rig.conn(rig.agent(dec), "receiver", dst, load_timeout=2.0)
    r.start_load_kv("A", [0, 1])
    r.cancel_load("A")  # the decode engine dropped A before its KV came
    s.declare("A", dec.ctrl, 2)
    save_step(s, {"A": ([2, 3], [0, 1])})
    Pump([s]).until(sent=["A"])
    s.declare("B", dec.ctrl, 2)  # the whole pool again
    r.start_load_kv("B", [6, 7])
    save_step(s, {"B": ([4, 5], [6, 7])})
    pump = Pump([s], [r])
    pump.until(sent=["B"], received=["B"], timeout=3.0)
    assert pump.rfail == [{}] and pump.received == [{"B"}]
    assert_untouched(dst, {6, 7})


def test_a_request_of_no_blocks_is_reported_sent(rig):
    """Nothing to send: reported sent all the same (the engine frees it then)."""
    pre, dec = rig.broker("prefill", 8), rig.broker("decode", 8)
    s = rig.conn(rig.agent(pre), "sender", paged(4, seed=15))
    s.declare("empty", dec.ctrl, 0)
    Pump([s]).until(sent=["empty"], timeout=1.0)
