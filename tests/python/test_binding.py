# SPDX-License-Identifier: MIT
"""pdkv's Python binding on real brokers: the round trip, zero copy, and the
life of Loan and Chunk objects (views, invalidation, the pool)."""
import warnings

import numpy as np
import pytest

import pdkv
from pdkv_testutil import _watchdog  # noqa: F401 (autouse: a hang fails the run)
from pdkv_testutil import WAIT_S, admit, fill, mapping_of, payload, segment_of, send, wait_event


# ---- the round trip ------------------------------------------------------------------------

def test_round_trip_several_chunks_str_and_bytes_keys(pair):
    tx, rx, ep = pair
    slot = tx.slot_size
    assert slot == 64 * 1024 and rx.slot_size == slot
    lens = [1, 1000, 4097, slot - 1, 77]
    keys = ["rt/0", b"rt/1", "rt/2-\u00e9", b"rt/3", "rt/4"]
    data = [payload(n, seed) for seed, n in enumerate(lens)]

    admit(tx, "rt", ep, len(lens))
    loans = tx.alloc("rt", len(lens))
    assert len(loans) == len(lens)
    for loan, d in zip(loans, data):
        assert len(loan) == slot and loan.valid
        fill(loan, d)  # numpy.copyto into numpy.frombuffer(loan)
    # Two batches: the first not last, the second last.
    tx.put("rt", ep, [(loans[i], keys[i], lens[i]) for i in (0, 1)], total_chunks=5)
    assert tx.next_event(0.3) is None, "an event before the last batch"
    tx.put("rt", ep, [(loans[i], keys[i], lens[i]) for i in (2, 3, 4)], total_chunks=5,
           last=True)
    ev = wait_event(tx, "rt")
    assert (ev.type, ev.status, ev.chunks, ev.bytes) == (pdkv.EV_PUT_DONE, 0, 5, sum(lens))

    info = rx.recv_wait("rt", timeout=WAIT_S)
    assert (info.chunks, info.status) == (5, 0)
    for k, d in zip(keys, data):
        c = rx.lookup(k)
        assert len(c) == len(d)
        assert bytes(c) == d
        assert np.array_equal(np.frombuffer(c, np.uint8), np.frombuffer(d, np.uint8))
    # A str key and its UTF-8 bytes name the same chunk.
    assert bytes(rx.lookup("rt/2-\u00e9".encode())) == data[2]
    assert bytes(rx.lookup(b"rt/1".decode())) == data[1]
    rx.recv_release("rt")
    with pytest.raises(pdkv.PdkvNotFound):
        rx.lookup("rt/0")


def test_round_trip_zero_length_and_full_slot(pair):
    tx, rx, ep = pair
    full = payload(tx.slot_size, 7)
    admit(tx, "edge", ep, 2)
    a, b = tx.alloc("edge", 2)
    fill(b, full)
    tx.put("edge", ep, [(a, "edge/empty", 0), (b, "edge/full")], total_chunks=2, last=True)
    ev = wait_event(tx, "edge")
    assert (ev.type, ev.bytes) == (pdkv.EV_PUT_DONE, len(full))
    assert rx.recv_wait("edge", WAIT_S).status == 0
    assert len(rx.lookup("edge/empty")) == 0
    assert bytes(rx.lookup("edge/full")) == full  # (loan, key): the whole slot
    rx.recv_release("edge")


def test_round_trip_torch(pair):
    torch = pytest.importorskip("torch")
    tx, rx, ep = pair
    src = torch.arange(1000, dtype=torch.float32)
    admit(tx, "pt", ep, 1)
    [loan] = tx.alloc("pt", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch only warns for a read-only buffer
        dst = torch.frombuffer(loan, dtype=torch.float32, count=1000)
    dst.copy_(src)
    del dst
    tx.put("pt", ep, [(loan, "pt/0", 4000)], total_chunks=1, last=True)
    assert wait_event(tx, "pt").type == pdkv.EV_PUT_DONE
    rx.recv_wait("pt", WAIT_S)
    c = rx.lookup("pt/0")
    got = torch.frombuffer(bytearray(bytes(c)), dtype=torch.float32)
    assert torch.equal(got, src)
    rx.recv_release("pt")


# ---- zero copy -----------------------------------------------------------------------------

def test_loan_view_is_the_shared_memory(pair, prefill_broker):
    tx, rx, ep = pair
    admit(tx, "zc", ep, 1)
    [loan] = tx.alloc("zc", 1)
    a = np.frombuffer(loan, np.uint32)
    # The view lies in the broker's segment, mapped shared and writable.
    path, perms = mapping_of(a.ctypes.data)
    assert path == segment_of(prefill_broker) and perms.startswith("rw") and perms[3] == "s"
    a[:] = np.arange(a.size, dtype=np.uint32)   # written in place, never copied
    a[5] = 0xDEADBEEF
    assert bytes(memoryview(loan)[20:24]) == b"\xef\xbe\xad\xde"  # another view sees it
    loan.write(b"hello", offset=4)
    assert a[1] == int.from_bytes(b"hello"[:4], "little")  # and the array sees write()
    expect = a.tobytes()
    del a
    tx.put("zc", ep, [(loan, "zc/0")], total_chunks=1, last=True)
    assert wait_event(tx, "zc").type == pdkv.EV_PUT_DONE
    rx.recv_wait("zc", WAIT_S)
    assert bytes(rx.lookup("zc/0")) == expect
    rx.recv_release("zc")


def test_chunk_view_is_read_only_shared_memory(pair, decode_broker):
    tx, rx, ep = pair
    send(tx, ep, "ro", [("ro/0", payload(300, 1))])
    rx.recv_wait("ro", WAIT_S)
    c = rx.lookup("ro/0")
    a = np.frombuffer(c, np.uint8)
    path, perms = mapping_of(a.ctypes.data)
    assert path == segment_of(decode_broker) and perms.startswith("r-")
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1
    with pytest.raises(ValueError):
        a.setflags(write=True)
    m = memoryview(c)
    assert m.readonly and m.nbytes == 300
    with pytest.raises(TypeError):
        m[0] = 1
    out = bytearray(310)
    assert c.read_into(out, 100) == 200
    assert bytes(out[:200]) == payload(300, 1)[100:]
    del a, m
    rx.recv_release("ro")


# ---- invalidation --------------------------------------------------------------------------

def assert_ended(obj):
    assert obj.valid is False
    with pytest.raises(pdkv.PdkvStale):
        memoryview(obj)
    with pytest.raises(pdkv.PdkvStale):
        np.frombuffer(obj, np.uint8)
    with pytest.raises(pdkv.PdkvStale):
        len(obj)


def test_loan_ends_at_put_and_at_release(pair):
    tx, rx, ep = pair
    admit(tx, "end", ep, 1)
    a, b = tx.alloc("end", 2)
    tx.release(b)
    assert_ended(b)
    with pytest.raises(pdkv.PdkvStale):
        b.write(b"x")
    with pytest.raises(pdkv.PdkvStale):
        tx.release(b)  # ended: a second release is refused
    with pytest.raises(pdkv.PdkvStale):
        tx.put("end", ep, [(a, "end/0", 1), (b, "end/1", 1)], total_chunks=1, last=True)
    assert a.valid  # an ended loan in the batch: nothing taken
    tx.put("end", ep, [(a, "end/0", 1)], total_chunks=1, last=True)
    assert_ended(a)
    with pytest.raises(pdkv.PdkvStale):
        tx.put("end", ep, [(a, "end/0", 1)], total_chunks=1, last=True)
    assert wait_event(tx, "end").type == pdkv.EV_PUT_DONE


def test_chunk_ends_at_recv_release(pair):
    tx, rx, ep = pair
    send(tx, ep, "cr", [("cr/0", b"abc"), ("cr/1", b"de")])
    rx.recv_wait("cr", WAIT_S)
    c0, c1 = rx.lookup("cr/0"), rx.lookup("cr/1")
    assert c0.valid and len(c1) == 2
    rx.recv_release("cr")
    assert_ended(c0)
    assert_ended(c1)
    with pytest.raises(pdkv.PdkvStale):
        c0.read_into(bytearray(3))


def test_close_ends_loans_and_chunks(prefill_broker, decode_broker):
    ep = decode_broker.ctrl
    tx, rx = prefill_broker.agent(), decode_broker.agent()
    try:
        send(tx, ep, "cl", [("cl/0", b"xyz")])
        admit(tx, "cl2", ep, 1)
        [loan] = tx.alloc("cl2", 1)
        rx.recv_wait("cl", WAIT_S)
        c = rx.lookup("cl/0")
    finally:
        tx.close()
        rx.close()
    assert_ended(loan)
    assert_ended(c)


@pytest.mark.parametrize("kind", ["memoryview", "numpy"])
def test_put_and_release_refused_while_a_view_lives(pair, kind):
    tx, rx, ep = pair
    view = memoryview if kind == "memoryview" else (lambda o: np.frombuffer(o, np.uint8))
    admit(tx, "bv", ep, 2)
    a, b, c = tx.alloc("bv", 3)
    v = view(b)
    with pytest.raises(BufferError):
        tx.put("bv", ep, [(a, "bv/0", 1), (b, "bv/1", 1)], total_chunks=2, last=True)
    assert a.valid and b.valid  # nothing taken: neither loan ended
    with pytest.raises(BufferError):
        tx.release([c, b])
    assert b.valid and c.valid
    with pytest.raises(BufferError):
        tx.release(b)
    assert tx.next_event(0.3) is None  # nothing was sent
    del v
    tx.release(c)
    tx.put("bv", ep, [(a, "bv/0", 1), (b, "bv/1", 1)], total_chunks=2, last=True)
    assert not a.valid and not b.valid and not c.valid
    ev = wait_event(tx, "bv")
    assert (ev.type, ev.chunks) == (pdkv.EV_PUT_DONE, 2)


@pytest.mark.parametrize("kind", ["memoryview", "numpy"])
def test_recv_release_and_close_refused_while_a_view_lives(pair, kind):
    tx, rx, ep = pair
    view = memoryview if kind == "memoryview" else (lambda o: np.frombuffer(o, np.uint8))
    send(tx, ep, "rv", [("rv/0", b"0123")])
    rx.recv_wait("rv", WAIT_S)
    c = rx.lookup("rv/0")
    v = view(c)
    with pytest.raises(BufferError):
        rx.recv_release("rv")
    assert c.valid and bytes(v) == b"0123"
    assert bytes(rx.lookup("rv/0")) == b"0123"  # the request is still here
    with pytest.raises(BufferError):
        rx.close()
    assert not rx.closed and rx.recv_wait("rv", 0).status == 0  # still attached
    del v
    rx.recv_release("rv")
    assert not c.valid
    # close() with a live view of a loan, likewise.
    admit(tx, "rv2", ep, 1)
    [loan] = tx.alloc("rv2", 1)
    v = view(loan)
    with pytest.raises(BufferError):
        tx.close()
    assert not tx.closed and loan.valid
    del v
    tx.close()
    assert tx.closed and not loan.valid


def test_same_loan_twice_in_one_put(pair):
    tx, rx, ep = pair
    admit(tx, "tw", ep, 2)
    a, b = tx.alloc("tw", 2)
    with pytest.raises(ValueError):
        tx.put("tw", ep, [(a, "tw/0", 1), (a, "tw/1", 1)], total_chunks=2, last=True)
    assert a.valid and b.valid
    with pytest.raises(ValueError):
        tx.release([b, b])
    assert b.valid
    tx.put("tw", ep, [(a, "tw/0", 1), (b, "tw/1", 1)], total_chunks=2, last=True)
    assert wait_event(tx, "tw").type == pdkv.EV_PUT_DONE


def test_loan_of_another_agent(pair, prefill_broker):
    tx, rx, ep = pair
    with prefill_broker.agent() as other:
        admit(other, "oa", ep, 1)
        [foreign] = other.alloc("oa", 1)
        admit(tx, "ob", ep, 1)
        with pytest.raises(ValueError):
            tx.put("ob", ep, [(foreign, "ob/0", 1)], total_chunks=1, last=True)
        with pytest.raises(ValueError):
            tx.release(foreign)
        assert foreign.valid
        other.put("oa", ep, [(foreign, "oa/0", 1)], total_chunks=1, last=True)
        assert wait_event(other, "oa").type == pdkv.EV_PUT_DONE


def test_dropped_loans_go_back_to_the_pool(pair):
    tx, rx, ep = pair
    admit(tx, "dr", ep, 1)
    loans = tx.alloc("dr", 32)  # the whole send pool
    with pytest.raises(pdkv.PdkvTimeout):
        tx.alloc("dr", 1)  # it is empty
    fill(loans[3], b"dropped")
    del loans  # never put nor released
    again = tx.alloc("dr", 32)
    assert len(again) == 32
    tx.release(again)
    assert not any(l.valid for l in again)
    assert len(tx.alloc("dr", 32)) == 32  # released ones are back too (and dropped again)
