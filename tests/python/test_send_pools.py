# SPDX-License-Identifier: MIT
"""pdbroker --send-pools from Python workers: each sending worker loans from
a pool of its own, so one that holds all of its staging (a stalled
engine) does not stop another from moving a request."""
import pytest

import pdkv
import pdkv.local
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S, admit, payload, send


@pytest.fixture
def pools_broker():
    with pdkv.local.LocalBroker(role="prefill", send_slots=8, slot_size="64K",
                                send_pools=2) as b:
        yield b


def test_a_worker_holding_its_pool_stalls_no_other(pools_broker, decode_broker):
    ep = decode_broker.ctrl
    with pools_broker.agent() as a, pools_broker.agent() as b, decode_broker.agent() as rx:
        admit(a, "hog", ep, 4)
        hoard = a.alloc("hog", 4)  # all of a's pool (8 slots in 2 pools)
        with pytest.raises(pdkv.PdkvTooBig):
            a.alloc("hog", 5)  # more than its own pool
        items = [("b/%d" % i, payload(1000 + i, i)) for i in range(4)]
        send(b, ep, "b", items)  # b's own 4 slots
        assert rx.recv_wait("b", timeout=WAIT_S).status == 0
        for key, data in items:
            assert bytes(rx.lookup(key.encode())) == data
        rx.recv_release("b")
        a.release(hoard)
