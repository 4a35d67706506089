# SPDX-License-Identifier: MIT
"""pdkv's Python binding on real brokers: errors, admission, cancel, close,
request states, and a broker that dies under its agents."""
import errno
import time

import pytest

import pdkv
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S, Call, admit, fill, kill_broker, send, wait_event


def test_timeout_is_timeout_error_with_etimedout(pair):
    tx, rx, ep = pair
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as ei:
        rx.recv_wait("never", timeout=0.2)
    assert time.monotonic() - t0 >= 0.15
    e = ei.value
    assert isinstance(e, pdkv.PdkvTimeout) and isinstance(e, pdkv.PdkvError)
    assert isinstance(e, OSError) and e.errno == errno.ETIMEDOUT
    with pytest.raises(pdkv.PdkvTimeout):
        rx.recv_wait("never", timeout=0)
    assert tx.next_event(0.1) is None  # next_event says None, it does not raise
    assert issubclass(pdkv.PdkvTimeout, TimeoutError)


def test_alloc_of_an_undeclared_request(pair):
    tx, rx, ep = pair
    with pytest.raises(pdkv.PdkvNotFound) as ei:
        tx.alloc("undeclared", 1)
    assert isinstance(ei.value, FileNotFoundError) and ei.value.errno == errno.ENOENT
    with pytest.raises(pdkv.PdkvNotFound):
        tx.req_state("undeclared")


def test_admission_queues_behind_a_full_pool_and_req_states(pair):
    """The receive pool is 32 slots: "big" reserves them all, so "pend" waits
    for admission; it is admitted when big's chunks are released."""
    tx, rx, ep = pair
    admit(tx, "big", ep, 32)
    assert tx.req_state("big") == (pdkv.REQ_ADMITTED, 0)
    tx.declare("pend", ep, 1)
    assert tx.next_event(0.5) is None  # no admission while the pool is reserved
    assert tx.req_state("pend") == (pdkv.REQ_DECLARED, 0)
    with pytest.raises(pdkv.PdkvAgain) as ei:
        tx.alloc("pend", 1, timeout=0)
    assert isinstance(ei.value, BlockingIOError) and ei.value.errno == errno.EAGAIN
    # Nothing was taken: the whole send pool is still there for big.
    loans = tx.alloc("big", 32)
    for i, loan in enumerate(loans):
        fill(loan, bytes([i]) * 10)
    tx.put("big", ep, [(l, "big/%d" % i, 10) for i, l in enumerate(loans)], total_chunks=32,
           last=True)
    ev = wait_event(tx, "big")
    assert (ev.type, ev.chunks, ev.bytes) == (pdkv.EV_PUT_DONE, 32, 320)
    assert tx.req_state("big") == (pdkv.REQ_DONE, 0)
    with pytest.raises(pdkv.PdkvAlready):
        tx.alloc("big", 1)
    assert tx.req_state("pend") == (pdkv.REQ_DECLARED, 0)  # the chunks still hold the pool
    assert rx.recv_wait("big", WAIT_S) == (32, 0)
    assert bytes(rx.lookup("big/31")) == bytes([31]) * 10
    rx.recv_release("big")
    ev = wait_event(tx, "pend")
    assert (ev.type, ev.status, ev.chunks) == (pdkv.EV_ADMITTED, 0, 1)
    assert tx.req_state("pend") == (pdkv.REQ_ADMITTED, 0)
    [loan] = tx.alloc("pend", 1)
    tx.put("pend", ep, [(loan, "pend/0", 0)], total_chunks=1, last=True)
    assert wait_event(tx, "pend").type == pdkv.EV_PUT_DONE
    assert tx.req_state("pend") == (pdkv.REQ_DONE, 0)
    assert rx.recv_wait("pend", WAIT_S) == (1, 0)
    rx.recv_release("pend")


def test_request_larger_than_the_receive_pool(pair):
    tx, rx, ep = pair
    tx.declare("huge", ep, 33)  # the pool holds 32
    ev = wait_event(tx, "huge")
    assert (ev.type, ev.status) == (pdkv.EV_PUT_FAILED, -errno.E2BIG)
    err = pdkv.error_of(ev.status)
    assert isinstance(err, pdkv.PdkvTooBig) and err.errno == errno.E2BIG
    assert pdkv.error_of(0) is None
    assert tx.req_state("huge") == (pdkv.REQ_FAILED, -errno.E2BIG)
    with pytest.raises(pdkv.PdkvCancelled):
        tx.alloc("huge", 1)


def test_declare_twice(pair):
    tx, rx, ep = pair
    tx.declare("twice", ep, 1)
    with pytest.raises(pdkv.PdkvExists) as ei:
        tx.declare("twice", ep, 1)
    assert isinstance(ei.value, FileExistsError) and ei.value.errno == errno.EEXIST
    assert wait_event(tx, "twice").type == pdkv.EV_ADMITTED
    assert tx.next_event(0.3) is None  # one admission: the second declaration took nothing


def test_bad_types(pair, decode_broker):
    tx, rx, ep = pair
    admit(tx, "ty", ep, 1)
    [loan] = tx.alloc("ty", 1)
    bad = [
        lambda: tx.declare(123, ep, 1),
        lambda: tx.declare("ty2", 5, 1),
        lambda: tx.declare("ty2", ep, "1"),
        lambda: tx.alloc(None, 1),
        lambda: tx.alloc("ty", "1"),
        lambda: tx.req_state(2),
        lambda: tx.put("ty", ep, [loan], total_chunks=1, last=True),
        lambda: tx.put("ty", ep, [(loan,)], total_chunks=1, last=True),
        lambda: tx.put("ty", ep, [(bytearray(10), "k")], total_chunks=1, last=True),
        lambda: tx.put("ty", ep, [(loan, 7)], total_chunks=1, last=True),
        lambda: tx.put("ty", ep, [(loan, "k", "3")], total_chunks=1, last=True),
        lambda: tx.put("ty", ep, 5, total_chunks=1, last=True),
        lambda: tx.release(5),
        lambda: tx.release([loan, "x"]),
        lambda: tx.cancel(1.5),
        lambda: tx.next_event("1"),
        lambda: rx.recv_wait("ty", timeout="1"),
        lambda: rx.lookup(1.5),
        lambda: rx.recv_release(None),
        lambda: pdkv.Agent(broker=1, rundir=decode_broker.rundir),
        lambda: pdkv.Agent(broker=decode_broker.name, rundir=1),
        lambda: loan.write("text"),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(TypeError):
            call()
            pytest.fail("bad call %d accepted" % i)
    assert loan.valid  # none of them ended the loan
    tx.put("ty", ep, [(loan, "ty/0", 1)], total_chunks=1, last=True)
    assert wait_event(tx, "ty").type == pdkv.EV_PUT_DONE


def test_lengths_and_values(pair):
    tx, rx, ep = pair
    long_id, long_key = "r" * (pdkv.REQ_ID_MAX + 1), b"k" * (pdkv.KEY_MAX + 1)
    bad = [
        lambda: tx.declare("", ep, 1),
        lambda: tx.declare(b"", ep, 1),
        lambda: tx.declare(long_id, ep, 1),
        lambda: tx.declare("ok", "", 1),
        lambda: tx.declare("a\0b", ep, 1),       # a C string: never a shorter id
        lambda: tx.declare("ok", ep + "\0", 1),
        lambda: tx.req_state(b"a\0"),
        lambda: rx.recv_wait("a\0b", 0),
        lambda: tx.alloc(long_id, 1),
        lambda: tx.alloc("", 1),
        lambda: tx.req_state(long_id),
        lambda: tx.cancel(""),
        lambda: rx.recv_wait(long_id, 0),
        lambda: rx.recv_release(""),
        lambda: rx.lookup(long_key),
        lambda: rx.lookup(b""),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(ValueError):
            call()
            pytest.fail("bad call %d accepted" % i)
    # The longest id and key are fine; so is a multi-byte str at the limit.
    req = "\u00e9" * (pdkv.REQ_ID_MAX // 2)
    key = b"k" * pdkv.KEY_MAX
    admit(tx, req, ep, 1)
    with pytest.raises(ValueError):
        tx.alloc(req, 0)
    with pytest.raises(ValueError):
        tx.alloc(req, 4097)
    [loan] = tx.alloc(req, 1)
    for length in (-1, tx.slot_size + 1):
        with pytest.raises(ValueError):
            tx.put(req, ep, [(loan, key, length)], total_chunks=1, last=True)
    with pytest.raises(ValueError):
        tx.put(req, ep, [(loan, long_key, 1)], total_chunks=1, last=True)
    with pytest.raises(ValueError):
        loan.write(b"x", offset=tx.slot_size)
    with pytest.raises(ValueError):
        loan.write(b"x", offset=-1)
    with pytest.raises(pdkv.PdkvTooBig):
        tx.alloc(req, 33)  # more than the send pool (32) ever holds
    assert loan.valid
    loan.write(b"edge")
    tx.put(req, ep, [(loan, key, 4)], total_chunks=1, last=True)
    assert wait_event(tx, req).type == pdkv.EV_PUT_DONE
    assert rx.recv_wait(req, WAIT_S).status == 0
    assert bytes(rx.lookup(key)) == b"edge"
    rx.recv_release(req)


def test_negative_timeouts(pair, decode_broker):
    tx, rx, ep = pair
    bad = [
        lambda: rx.recv_wait("x", timeout=-1),
        lambda: rx.recv_wait("x", timeout=-0.001),
        lambda: rx.recv_wait("x", timeout=float("nan")),
        lambda: tx.next_event(timeout=-0.5),
        lambda: tx.alloc("x", 1, timeout=-1),
        lambda: tx.declare("x", ep, 1, timeout=-1),
        lambda: pdkv.Agent(broker=decode_broker.name, rundir=decode_broker.rundir,
                           attach_timeout=-1),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(ValueError):
            call()
            pytest.fail("bad call %d accepted" % i)
    with pytest.raises(pdkv.PdkvNotFound):
        tx.req_state("x")  # the refused declare declared nothing


def test_attach_to_a_missing_broker(decode_broker):
    # A missing socket may be a broker still starting: attach retries until
    # attach_timeout, then says PdkvNotFound (not PdkvTimeout).
    t0 = time.monotonic()
    with pytest.raises(pdkv.PdkvNotFound) as ei:
        pdkv.Agent(broker="no-such-broker", rundir=decode_broker.rundir, attach_timeout=0.3)
    assert isinstance(ei.value, FileNotFoundError) and ei.value.errno == errno.ENOENT
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(pdkv.PdkvNotFound):
        pdkv.Agent(broker=decode_broker.name, rundir=decode_broker.rundir + "-missing",
                   attach_timeout=0.1)


def test_cancel_a_waiting_and_an_admitted_request(pair):
    tx, rx, ep = pair
    admit(tx, "adm", ep, 32)  # holds the whole receive pool
    tx.declare("wait", ep, 1)  # so this one waits for admission
    tx.cancel("wait")
    ev = wait_event(tx, "wait")
    assert (ev.type, ev.status) == (pdkv.EV_PUT_FAILED, -errno.ECANCELED)
    assert isinstance(pdkv.error_of(ev.status), pdkv.PdkvCancelled)
    assert tx.req_state("wait") == (pdkv.REQ_FAILED, -errno.ECANCELED)
    with pytest.raises(pdkv.PdkvCancelled) as ei:
        tx.alloc("wait", 1)
    assert ei.value.errno == errno.ECANCELED
    tx.cancel("wait")  # idempotent
    [loan] = tx.alloc("adm", 1)
    tx.cancel("adm")
    ev = wait_event(tx, "adm")
    assert (ev.type, ev.status) == (pdkv.EV_PUT_FAILED, -errno.ECANCELED)
    with pytest.raises(pdkv.PdkvCancelled):
        tx.alloc("adm", 1, timeout=1)
    tx.release(loan)
    # The cancelled request's reservation is withdrawn: the pool admits 32 again.
    admit(tx, "after", ep, 32)


def test_close_twice_calls_after_close_and_context_manager(prefill_broker, decode_broker):
    ep = decode_broker.ctrl
    tx = prefill_broker.agent()
    fd = tx.fileno()
    assert fd >= 0 and not tx.closed
    tx.close()
    tx.close()
    assert tx.closed
    after = [
        lambda: tx.declare("c", ep, 1),
        lambda: tx.alloc("c", 1),
        lambda: tx.req_state("c"),
        lambda: tx.put("c", ep, [], total_chunks=0, last=True),
        lambda: tx.release([]),
        lambda: tx.cancel("c"),
        lambda: tx.next_event(),
        lambda: tx.next_event(None),
        lambda: tx.fileno(),
        lambda: tx.recv_wait("c", 0),
        lambda: tx.lookup("c"),
        lambda: tx.recv_release("c"),
        lambda: tx.__enter__(),
    ]
    for i, call in enumerate(after):
        with pytest.raises(pdkv.PdkvNotConnected) as ei:
            call()
            pytest.fail("call %d after close accepted" % i)
        assert isinstance(ei.value, ConnectionError) and ei.value.errno == errno.ENOTCONN
    with decode_broker.agent() as rx:
        assert not rx.closed
    assert rx.closed
    with pytest.raises(RuntimeError):
        with decode_broker.agent() as rx2:
            raise RuntimeError("inside")
    assert rx2.closed


def test_prefill_broker_killed(prefill_broker, decode_broker):
    ep = decode_broker.ctrl
    with prefill_broker.agent() as tx:
        admit(tx, "pk", ep, 2)
        [loan] = tx.alloc("pk", 1)
        waiter = Call(tx.next_event, None)  # blocked until the broker goes
        time.sleep(0.2)
        assert not waiter.join(0)
        t0 = time.monotonic()
        kill_broker(prefill_broker)
        assert waiter.join(WAIT_S), "next_event(None) still blocked after the broker died"
        assert isinstance(waiter.error, pdkv.PdkvNotConnected), waiter.error
        assert time.monotonic() - t0 < 3.0
        for call in (lambda: tx.declare("pk2", ep, 1), lambda: tx.alloc("pk", 1),
                     lambda: tx.next_event(0), lambda: tx.cancel("pk"),
                     lambda: tx.req_state("pk"),
                     lambda: tx.put("pk", ep, [(loan, "pk/0", 1)], total_chunks=2)):
            with pytest.raises(pdkv.PdkvNotConnected):
                call()
        assert not loan.valid  # a put refused for a dead broker ends the loan


def test_decode_broker_killed(decode_broker):
    with decode_broker.agent() as rx:
        waiter = Call(rx.recv_wait, "dk", timeout=None)
        time.sleep(0.2)
        assert not waiter.join(0)
        t0 = time.monotonic()
        kill_broker(decode_broker)
        assert waiter.join(WAIT_S), "recv_wait(None) still blocked after the broker died"
        assert isinstance(waiter.error, pdkv.PdkvNotConnected), waiter.error
        assert time.monotonic() - t0 < 3.0
        for call in (lambda: rx.recv_wait("dk", 0), lambda: rx.recv_wait("dk", 1),
                     lambda: rx.recv_release("dk")):
            with pytest.raises(pdkv.PdkvNotConnected):
                call()


def test_lookup_after_the_decode_broker_died(pair, decode_broker):
    tx, rx, ep = pair
    send(tx, ep, "ld", [("ld/0", b"here")])
    assert rx.recv_wait("ld", WAIT_S).status == 0
    kill_broker(decode_broker)
    with pytest.raises(pdkv.PdkvNotConnected):
        rx.recv_wait("ld", 1)  # the agent knows the broker is gone
    with pytest.raises(pdkv.PdkvNotConnected):
        rx.lookup("ld/1")  # absent: PdkvNotFound today
    with pytest.raises(pdkv.PdkvNotConnected):
        rx.lookup("ld/0")  # present: a Chunk today, whose pin can never be released
