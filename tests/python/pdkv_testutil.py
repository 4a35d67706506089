# SPDX-License-Identifier: MIT
"""Helpers shared by the binding's tests (not collected: no test_ prefix).
Everything here drives real brokers through the real binding."""
import faulthandler
import os
import threading
import time

import numpy as np
import pytest

import pdkv

WAIT_S = 5.0  # the longest any step that should happen soon may take


HANG_S = 30.0  # a test still running after this is hung: the run fails


@pytest.fixture(autouse=True)
def _watchdog():
    """A call that hangs holding the GIL (a binding that forgot to drop it)
    cannot be interrupted from Python: after HANG_S faulthandler prints every
    thread's stack and exits the run, a failure instead of a hang. (Test
    modules import this fixture: autouse.)"""
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def wait_event(ag, req_id, want=None, timeout=WAIT_S):
    """The next event of req_id (events of other requests are skipped); with
    want, events of other types are skipped too. Fails after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no %s event for %r in %.1f s" % (want, req_id, timeout)
        ev = ag.next_event(timeout=left)
        if ev is None:
            continue
        if ev.req_id == req_id and (want is None or ev.type == want):
            return ev


def admit(tx, req_id, ep, total):
    """Declare req_id and wait for its EV_ADMITTED."""
    tx.declare(req_id, ep, total)
    ev = wait_event(tx, req_id)
    assert ev.type == pdkv.EV_ADMITTED, ev
    assert ev.status == 0 and ev.chunks == total, ev
    return ev


def fill(loan, data):
    """Copy data (bytes or uint8 array) into loan through a numpy view."""
    src = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
    dst = np.frombuffer(loan, np.uint8, len(src))
    np.copyto(dst, src)
    del dst


def send(tx, ep, req_id, items):
    """A whole request in one batch: items is [(key, bytes)]. Returns its
    EV_PUT_DONE."""
    admit(tx, req_id, ep, len(items))
    loans = tx.alloc(req_id, len(items), timeout=WAIT_S)
    for loan, (_, data) in zip(loans, items):
        fill(loan, data)
    tx.put(req_id, ep, [(l, k, len(d)) for l, (k, d) in zip(loans, items)],
           total_chunks=len(items), last=True)
    ev = wait_event(tx, req_id)
    assert ev.type == pdkv.EV_PUT_DONE and ev.status == 0, ev
    return ev


def payload(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def segment_of(broker):
    return "/dev/shm/pdkv." + broker.name


def mapping_of(addr):
    """(path, perms) of the mapping of this process holding addr, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return (parts[5] if len(parts) > 5 else "", parts[1])
    return None


def kill_broker(broker):
    """SIGKILL the broker and reap it; its segment (which a killed broker
    leaves in /dev/shm) is removed, so the run leaves nothing behind."""
    broker.proc.kill()
    broker.proc.wait(10)
    try:
        os.unlink(segment_of(broker))
    except FileNotFoundError:
        pass


class Counter:
    """A thread running pure Python, counting: it advances only while the
    GIL is free for it."""

    def __init__(self):
        self.n = 0
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop:
            self.n += 1
            time.sleep(0.001)

    def __enter__(self):
        self._t.start()
        while self.n == 0:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._t.join(5)


class Call:
    """fn(*args) in a daemon thread; .result / .error once done."""

    def __init__(self, fn, *args, **kw):
        self.result = self.error = None
        self.t = threading.Thread(target=self._run, args=(fn, args, kw), daemon=True)
        self.t.start()

    def _run(self, fn, args, kw):
        try:
            self.result = fn(*args, **kw)
        except BaseException as e:  # noqa: B902 (reported to the test)
            self.error = e

    def join(self, timeout):
        self.t.join(timeout)
        return not self.t.is_alive()
