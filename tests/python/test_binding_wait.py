# SPDX-License-Identifier: MIT
"""pdkv's Python binding on real brokers: waiting. The GIL is free while a
call blocks; fileno() and events() for an event loop."""
import selectors
import signal
import threading
import time

import pytest

import pdkv
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S, Call, Counter, admit, send, wait_event

# A thread counting every millisecond gets far more than this in a second
# unless the GIL is held against it.
MIN_COUNT = 50


def test_gil_free_while_recv_wait_blocks(pair):
    tx, rx, ep = pair
    with Counter() as c:
        n0, t0 = c.n, time.monotonic()
        with pytest.raises(pdkv.PdkvTimeout):
            rx.recv_wait("never-sent", timeout=1.0)
        dt, dn = time.monotonic() - t0, c.n - n0
    assert 0.95 <= dt < 3.0
    assert dn >= MIN_COUNT, "the counter advanced %d times in %.2f s" % (dn, dt)


def test_gil_free_while_alloc_waits_for_slots(pair):
    tx, rx, ep = pair
    admit(tx, "gil", ep, 1)
    held = tx.alloc("gil", 32)  # the whole send pool: the next alloc waits
    with Counter() as c:
        n0, t0 = c.n, time.monotonic()
        with pytest.raises(pdkv.PdkvTimeout):
            tx.alloc("gil", 1, timeout=1.0)
        dt, dn = time.monotonic() - t0, c.n - n0
    assert 0.95 <= dt < 3.0
    assert dn >= MIN_COUNT, "the counter advanced %d times in %.2f s" % (dn, dt)
    tx.release(held)


def test_alloc_waiting_in_a_thread_gets_a_released_slot(pair):
    tx, rx, ep = pair
    admit(tx, "wt", ep, 1)
    held = tx.alloc("wt", 32)
    waiter = Call(tx.alloc, "wt", 1, timeout=WAIT_S)
    time.sleep(0.3)
    assert not waiter.join(0), "alloc did not wait for a slot"
    tx.release(held[0])  # runs while the other thread waits in alloc
    assert waiter.join(WAIT_S)
    assert waiter.error is None, waiter.error
    [loan] = waiter.result
    assert loan.valid and len(loan) == tx.slot_size
    tx.release(held[1:])
    tx.release(loan)


def test_next_event_forever_in_a_thread_ends_with_the_event(pair):
    tx, rx, ep = pair
    waiter = Call(tx.next_event, None)
    time.sleep(0.3)
    assert not waiter.join(0), "next_event(None) returned with no event: %r" % (waiter.result,)
    tx.declare("ne", ep, 1)  # this thread runs meanwhile: the GIL is free
    assert waiter.join(WAIT_S), "next_event(None) still blocked after the event came"
    assert waiter.error is None, waiter.error
    ev = waiter.result
    assert (ev.type, ev.req_id, ev.chunks) == (pdkv.EV_ADMITTED, "ne", 1)


def test_recv_wait_forever_in_a_thread_ends_when_the_request_arrives(pair):
    tx, rx, ep = pair
    waiter = Call(rx.recv_wait, "rw", timeout=None)
    time.sleep(0.3)
    assert not waiter.join(0)
    send(tx, ep, "rw", [("rw/0", b"x" * 100), ("rw/1", b"y")])
    assert waiter.join(WAIT_S)
    assert waiter.error is None, waiter.error
    assert waiter.result == (2, 0)
    assert bytes(rx.lookup("rw/1")) == b"y"
    rx.recv_release("rw")


def test_close_waits_for_a_call_in_flight_and_ends_it(prefill_broker):
    tx = prefill_broker.agent()
    waiter = Call(tx.next_event, None)
    time.sleep(0.2)
    t0 = time.monotonic()
    tx.close()  # the endless wait notices within a slice (1 s)
    assert time.monotonic() - t0 < 3.0
    assert waiter.join(WAIT_S)
    assert isinstance(waiter.error, pdkv.PdkvNotConnected), waiter.error
    assert tx.closed


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("call", ["recv_wait", "next_event"])
def test_a_signal_interrupts_an_endless_wait(pair, call):
    """Between its one-second slices an endless wait runs the signal handlers
    (Ctrl-C's KeyboardInterrupt; here SIGALRM's), whose exception it raises."""
    tx, rx, ep = pair
    ag, wait = (rx, lambda: rx.recv_wait("sig", None)) if call == "recv_wait" else \
        (tx, lambda: tx.next_event(None))
    # Should the signal be ignored, close() ends the wait (PdkvNotConnected), not a hang.
    rescue = threading.Timer(4.0, ag.close)

    def on_alarm(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        rescue.start()
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            wait()
        assert time.monotonic() - t0 < 2.5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        rescue.cancel()
    assert not ag.closed


def test_fileno_is_readable_when_an_event_arrives(pair):
    tx, rx, ep = pair
    with selectors.DefaultSelector() as sel:
        sel.register(tx.fileno(), selectors.EVENT_READ)
        assert sel.select(0.3) == [], "readable before any event"
        tx.declare("fd", ep, 1)
        ready = sel.select(WAIT_S)
        assert [k.fd for k, mask in ready] == [tx.fileno()]
        assert ready[0][1] & selectors.EVENT_READ
        evs = list(tx.events())
        assert [(e.type, e.req_id) for e in evs] == [(pdkv.EV_ADMITTED, "fd")]
        assert list(tx.events()) == []  # drained
        assert sel.select(0.3) == [], "still readable after the events were read"


def test_events_drains_every_event_that_arrived(pair):
    tx, rx, ep = pair
    names = ["ev%d" % i for i in range(4)]
    for n in names:
        tx.declare(n, ep, 1)
    deadline = time.monotonic() + WAIT_S  # req_state reads what has come, not the events
    while any(tx.req_state(n)[0] != pdkv.REQ_ADMITTED for n in names):
        assert time.monotonic() < deadline, [tx.req_state(n) for n in names]
        time.sleep(0.01)
    got = list(tx.events())
    assert sorted(e.req_id for e in got) == names
    assert all(e.type == pdkv.EV_ADMITTED for e in got)
    assert list(tx.events()) == [] and tx.next_event(0) is None
    for n in names:
        tx.cancel(n)
    assert {wait_event(tx, n).type for n in names} == {pdkv.EV_PUT_FAILED}
