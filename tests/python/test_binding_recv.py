# SPDX-License-Identifier: MIT
"""pdkv's Python binding on real brokers, the receiving side: what
recv_release() ends, and a request that fails half-way."""
import errno
import time

import pytest

import pdkv
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S, admit, fill, send, wait_event


def test_recv_release_ends_only_its_own_chunks(pair):
    tx, rx, ep = pair
    send(tx, ep, "X", [("X/0", b"x0"), ("X/1", b"x1")])
    send(tx, ep, "Y", [("Y/0", b"y0")])
    assert rx.recv_wait("X", WAIT_S).status == 0 and rx.recv_wait("Y", WAIT_S).status == 0
    x0, x1, y0 = rx.lookup("X/0"), rx.lookup("X/1"), rx.lookup("Y/0")
    v = memoryview(x0)  # a view of X's chunk does not stop Y's release
    rx.recv_release("Y")
    assert not y0.valid
    assert x0.valid and x1.valid and bytes(v) == b"x0" and bytes(x1) == b"x1"
    with pytest.raises(pdkv.PdkvNotFound):
        rx.lookup("Y/0")
    del v
    rx.recv_release("X")
    assert not x0.valid and not x1.valid


def test_recv_release_without_recv_wait_ignores_other_requests_views(pair):
    tx, rx, ep = pair
    send(tx, ep, "P", [("P/0", b"p")])
    send(tx, ep, "Q", [("Q/0", b"q")])
    deadline = time.monotonic() + WAIT_S  # lookup-polling, as a layer-wise loader does
    while True:
        try:
            p0, q0 = rx.lookup("P/0"), rx.lookup("Q/0")
            break
        except pdkv.PdkvNotFound:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    v = memoryview(p0)
    try:
        rx.recv_release("Q")  # no view of Q's chunk is alive
        assert not q0.valid and p0.valid
    finally:
        del v


def test_a_request_cancelled_half_way_fails_at_the_receiver(pair):
    tx, rx, ep = pair
    admit(tx, "half", ep, 2)
    first, second = tx.alloc("half", 2)
    fill(first, b"abc")
    tx.put("half", ep, [(first, "half/0", 3)], total_chunks=2)  # not the last batch
    deadline = time.monotonic() + WAIT_S
    while True:  # the first chunk arrives on its own
        try:
            early = rx.lookup("half/0")
            break
        except pdkv.PdkvNotFound:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert bytes(early) == b"abc"
    with pytest.raises(pdkv.PdkvTimeout):
        rx.recv_wait("half", 0.2)  # not complete
    tx.cancel("half")
    ev = wait_event(tx, "half")
    assert (ev.type, ev.status) == (pdkv.EV_PUT_FAILED, -errno.ECANCELED)
    info = rx.recv_wait("half", WAIT_S)
    assert info.status == -errno.ECANCELED
    assert isinstance(pdkv.error_of(info.status), pdkv.PdkvCancelled)
    # The failed request's pins go with recv_release() (which finds no request
    # left to consume: PdkvNotFound), and the chunk's view with them.
    try:
        rx.recv_release("half")
    except pdkv.PdkvNotFound:
        pass
    assert not early.valid
    tx.release(second)
    # Nothing of it is held at the receiver: the whole pool admits 32 again.
    admit(tx, "whole", ep, 32)
